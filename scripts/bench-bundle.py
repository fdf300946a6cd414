#!/usr/bin/env python3
"""Benchmark the bundler on real vendor trees: ELF analysis time and copy throughput.

    python3 scripts/bench-bundle.py            # CUDA 13: cudart, cuBLAS, cuBLASLt, NCCL, NVRTC (~1.1 GB)
    python3 scripts/bench-bundle.py --rocm     # plus Debian sid's ROCm set with rocBLAS/hipBLASLt data

Libraries come from scripts/support/vendorlibs.py (downloaded once, cached). A small program is
built and patched to need them; plan_bundle (headers only) and place_bundle (copy +
sha256 + patchelf) are timed and compared with plain `cp` of the same bytes and with
`cp` + `sha256sum`. Numbers go to stdout as a Markdown table (a recorded run: docs/lab/2026-11-29-bundle-bench.md).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from builder import ui  # noqa: E402
from builder.runtime import elf  # noqa: E402
from builder.runtime.bundle import plan_bundle  # noqa: E402
from builder.runtime.layout import OwnFile  # noqa: E402
from builder.runtime.place import place_bundle  # noqa: E402
from builder.config.recipe import parse_recipe  # noqa: E402

from scripts.support import vendorlibs                            # noqa: E402

CUDA_NEEDS = ("libcublas.so.13", "libcudart.so.13", "libnccl.so.2", "libnvrtc.so.13")
ROCM_NEEDS = ("libhipblas.so.2", "librocblas.so.4", "libamdhip64.so.6", "libhipblaslt.so.1")


def build_own(work: Path, needs: tuple[str, ...]) -> list[OwnFile]:
    exe = vendorlibs.compile_c("int main(void) { return 0; }\n", work / "llama-bench-probe")
    mod = vendorlibs.compile_c("int probe(void) { return 1; }\n", work / "libggml-gpu.so", "-shared")
    subprocess.run(["patchelf", *[a for n in needs for a in ("--add-needed", n)], str(mod)], check=True)
    return [OwnFile(exe, "bin/llama-bench-probe", "executable"), OwnFile(mod, "bin/libggml-gpu.so", "module")]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def baseline_cp(plan, dest: Path) -> float:
    """Plain cp of the same bytes (libraries flat, each data folder with `cp -r SRC/. DST/`), flushed."""
    dest.mkdir()
    start = time.perf_counter()
    subprocess.run(["cp", "--reflink=never", *[str(v.real) for v in plan.vendor], str(dest)], check=True)
    for i, d in enumerate(plan.data):
        (dest / f"data{i}").mkdir()
        subprocess.run(["cp", "-r", "--reflink=never", f"{d.source}/.", str(dest / f"data{i}")], check=True)
    subprocess.run(["sync", "-f", str(dest)], check=False)
    return time.perf_counter() - start


def baseline_hash(files: list[Path]) -> float:
    """sha256 of the same bytes in one thread (hashlib, the page cache warm)."""
    start = time.perf_counter()
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            while chunk := fh.read(4 << 20):
                h.update(chunk)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rocm", action="store_true", help="add the ROCm set (1.6 GB with data)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--runs", type=int, default=3, help="plan_bundle repetitions (cold python cache each)")
    args = ap.parse_args()
    ui.set_level(ui.QUIET)

    cuda = vendorlibs.cuda_libs(vendorlibs.CUDA_WHEELS_FULL)
    search = [cuda.libdir]
    needs = CUDA_NEEDS
    recipe = None
    if args.rocm:
        rocm = vendorlibs.rocm_libs()
        search.append(rocm.libdir)
        needs += ROCM_NEEDS
        recipe = parse_recipe(Path("bench.toml"), f'name = "bench"\ndescription = "b"\nbackends = ["hip", "cuda"]\n'
                              f'[pin]\nsha = "{"0" * 40}"\n[[pin.mirrors]]\nkind = "local"\npath = "/x"\n'
                              f'[hip]\ntargets = ["gfx1100"]\n[cuda]\narchitectures = ["90"]\n')

    work = Path(tempfile.mkdtemp(prefix="bench-bundle.", dir=args.work))
    try:
        own = build_own(work, needs)
        plans = []
        for _ in range(args.runs):
            elf._CACHE.clear()                # measure parsing, not the in-process memo
            plans.append(timed(lambda: plan_bundle(own, search_dirs=search, recipe=recipe)))
        plan = plans[-1][0]
        analysis = min(t for _, t in plans)
        header_bytes = sum(elf.read_elf(v.real).bytes_read for v in plan.vendor)
        vendor_bytes = sum(v.real.stat().st_size for v in plan.vendor)
        data_bytes = sum(s for d in plan.data for _, s in d.files)
        total = plan.total_bytes()

        files = [v.real for v in plan.vendor] + [d.source / r for d in plan.data for r, _ in d.files]
        hash_s = baseline_hash(files)                   # also warms the page cache for both copies
        staging = work / "runtime"
        staging.mkdir()
        subprocess.run(["sync"], check=False)
        _, place_s = timed(lambda: (place_bundle(plan, staging), subprocess.run(["sync", "-f", str(staging)])))
        shutil.rmtree(staging)
        subprocess.run(["sync"], check=False)
        cp_s = baseline_cp(plan, work / "cp")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    gib = 1 << 30
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {platform.platform()}")
    print(f"vendor libraries: {len(plan.vendor)} files, {vendor_bytes / gib:.2f} GiB; "
          f"data: {sum(len(d.files) for d in plan.data)} files, {data_bytes / gib:.2f} GiB\n")
    print("| step | time | notes |")
    print("|---|---|---|")
    print(f"| plan_bundle (ELF analysis, policy, data folders) | {analysis * 1000:.0f} ms | best of {args.runs}; "
          f"{header_bytes / 1024:.0f} KiB of headers read for {vendor_bytes / gib:.2f} GiB of libraries |")
    print(f"| place_bundle (copy + sha256 + patchelf, synced) | {place_s:.2f} s | {total / gib / place_s:.2f} GiB/s "
          f"over {total / gib:.2f} GiB, {len(files)} files |")
    cp_bytes = vendor_bytes + sum(sum(f.stat().st_size for f in d.source.rglob("*") if f.is_file()) for d in plan.data)
    print(f"| cp --reflink=never of the same libraries and data folders (unpruned), synced | {cp_s:.2f} s | "
          f"{cp_bytes / gib / cp_s:.2f} GiB/s over {cp_bytes / gib:.2f} GiB |")
    print(f"| sha256 of the same files, one thread | {hash_s:.2f} s | {total / gib / hash_s:.2f} GiB/s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
