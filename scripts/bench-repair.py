#!/usr/bin/env python3
"""assemble repair of a large prebuilt input against plain `cp -a` of the same files.

    python3 scripts/bench-repair.py FOLDER... [--lib-path DIR] [--hip-target GFX] [--rounds 3] [--out results.json]

Each round runs, alternating, `assemble repair INPUT... --verify-static` (find, ELF closure, copy,
patchelf, manifest with every sha256, the static checks: everything but running the runtime) and
`cp -a` of exactly the files that runtime holds (the origins its manifest names), into fresh
folders on the same filesystem, each started after a sync (untimed), so no step pays for the
previous one's writeback. Medians over the rounds and their ratio, measured in one run;
the page cache is warm for both after the first round (the first round is reported apart).
A third column, cp -a followed by sha256 of every copied file on every core, is the floor of any
tool that writes a manifest of digests. Goal (issue 18): repair <= 1.2x cp -a.

    python3 scripts/bench-repair.py --unpack DEB... [--rounds 5] [--out results.json]

times only the unpacking of .deb inputs (builder.prebuilt.inputs.unpack: every refusal of a hostile
package included) against `dpkg-deb -x` of the same packages into one folder, alternating, each
into a fresh folder after a sync. Goal (issue 28): unpack <= 1.2x dpkg-deb -x.

Keep a run's numbers with --out docs/results/<machine>-<date>/bench-repair.json (bench-repair-unpack.json
with --unpack), then run scripts/figures:
docs/figures.md, the one place figures are quoted, gets their rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _repair(inputs: list[str], out: Path, extra: list[str]) -> float:
    os.sync()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "builder", "repair", *inputs, "--name", "bench", "--out", str(out),
                           "--verify-static", "-q", *extra], cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"repair failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def _copy(origins: list[tuple[str, str]], dest: Path) -> float:
    """cp -a of the same files, one cp per destination folder (as a shell user would)."""
    by_dir: dict[Path, list[str]] = {}
    for src, rel in origins:
        by_dir.setdefault((dest / rel).parent, []).append(src)
    os.sync()
    t0 = time.monotonic()
    for folder, sources in by_dir.items():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", *sources, str(folder)], check=True)
    return time.monotonic() - t0


def _copy_and_hash(origins: list[tuple[str, str]], dest: Path) -> float:
    """The floor of any manifest with digests: cp -a, then sha256 of every copied file on every core."""
    from concurrent.futures import ThreadPoolExecutor
    sys.path.insert(0, str(REPO))
    from builder.digest import sha256_file
    t0 = time.monotonic()
    _copy(origins, dest)     # syncs first, untimed
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(lambda rel: sha256_file(dest / rel), [rel for _, rel in origins]))
    return time.monotonic() - t0


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child waited for so far, theirs included."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _unpack(debs: list[str], out: Path) -> float:
    os.sync()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", ("import sys; from pathlib import Path; "
                           "from builder.prebuilt.inputs import classify, unpack; "
                           "unpack(classify(sys.argv[2:])[0], Path(sys.argv[1]))"), str(out), *debs],
                          cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"unpack failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def _dpkg_deb(debs: list[str], out: Path) -> float:
    out.mkdir()
    os.sync()
    t0 = time.monotonic()
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", deb, str(out)], check=True)
    return time.monotonic() - t0


def _bench_unpack(args: argparse.Namespace) -> int:
    debs = [str(Path(d).resolve()) for d in args.inputs]
    samples: dict[str, list[float]] = {"unpack": [], "dpkg-deb -x": []}
    cpu: dict[str, list[float]] = {"unpack": [], "dpkg-deb -x": []}
    steps = {"unpack": _unpack, "dpkg-deb -x": _dpkg_deb}
    with tempfile.TemporaryDirectory(prefix="bench-unpack-", dir=os.environ.get("TMPDIR")) as tmp:
        size = files = 0
        for r in range(args.rounds):
            for name in (list(steps) if r % 2 == 0 else list(reversed(steps))):
                out = Path(tmp) / f"{name.replace(' ', '')}{r}"
                before = _children_cpu()
                samples[name].append(steps[name](debs, out))
                cpu[name].append(_children_cpu() - before)
                if name == "unpack":
                    found = [p for p in out.rglob("*") if p.is_file() and not p.is_symlink()]
                    size, files = sum(p.stat().st_size for p in found), len(found)
                shutil.rmtree(out)
    med = _medians(samples)
    print(f"machine:  {_machine()}")
    print(f"packages: {' '.join(Path(d).name for d in debs)} ({sum(Path(d).stat().st_size for d in debs) / 2**20:.0f} MiB)")
    print(f"unpacked: {files} files, {size / 2**30:.2f} GiB; {args.rounds} rounds, medians over rounds 2.. (warm cache)")
    _rows(samples, med, 12)
    mcpu = _medians(cpu)
    for k, v in cpu.items():
        print(f"  {k:<12} cpu (user+sys, decompressor included) median {mcpu[k]:6.1f} s   "
              f"all {', '.join(f'{x:.1f}' for x in v)}")
    print(f"unpack / dpkg-deb -x: {med['unpack'] / med['dpkg-deb -x']:.2f} (wall)   "
          f"{mcpu['unpack'] / mcpu['dpkg-deb -x']:.2f} (cpu)   load average now {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps({"samples": samples, "cpu": cpu, "files": files, "bytes": size,
                                        "machine": _machine()}, indent=1))
    return 0


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    """Each step's median over rounds 2.. (the first warms the page cache)."""
    return {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in samples.items()}


def _rows(samples: dict[str, list[float]], med: dict[str, float], width: int) -> None:
    for k, v in samples.items():
        print(f"  {k:<{width}} first {v[0]:6.1f} s   median {med[k]:6.1f} s   all {', '.join(f'{x:.1f}' for x in v)}")


def _machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return f"{cpu} ({os.cpu_count()} cores), {platform.system()} {platform.release()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--lib-path", action="append", default=[])
    ap.add_argument("--hip-target", action="append", default=[])
    ap.add_argument("--accept-loader-risk", default="benchmark")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--unpack", action="store_true", help="time unpacking .deb inputs against dpkg-deb -x")
    args = ap.parse_args()
    if args.unpack:
        return _bench_unpack(args)
    if not_folders := [i for i in args.inputs if not Path(i).is_dir()]:
        # cp -a copies the files the manifest's origins name, which are paths only for folder inputs
        # (an archive's or a .deb's member is named "input:member")
        sys.exit(f"{not_folders[0]}: the repair mode needs folder inputs (cp -a copies the files the runtime's "
                 "origins name) -- fix: unpack it first (dpkg-deb -x, tar -x), or time unpacking with --unpack")
    extra = [x for d in args.lib_path for x in ("--lib-path", d)] + [x for g in args.hip_target for x in
                                                                      ("--hip-target", g)]
    extra += ["--accept-loader-risk", args.accept_loader_risk]
    samples: dict[str, list[float]] = {"repair": [], "cp -a": [], "cp+sha256": []}
    with tempfile.TemporaryDirectory(prefix="bench-repair-", dir=os.environ.get("TMPDIR")) as tmp:
        work = Path(tmp)
        size = files = 0
        origins: list[tuple[str, str]] = []
        steps = {
            "repair": lambda out: _repair([str(Path(i).resolve()) for i in args.inputs], out / "runtime-bench", extra),
            "cp -a": lambda out: _copy(origins, out),
            "cp+sha256": lambda out: _copy_and_hash(origins, out),
        }
        for r in range(args.rounds):
            # the order turns each round: a step right after another pays for the memory it left dirty
            order = list(steps)[r % 3:] + list(steps)[:r % 3] if r else list(steps)
            for name in order:
                out = work / f"{name.replace(' ', '')}{r}"
                samples[name].append(steps[name](out))
                if name == "repair":
                    m = json.loads((out / "runtime-bench" / "manifest.json").read_text())
                    origins = [(f["origin"], f["path"]) for f in m["files"]]
                    size, files = sum(f["size"] for f in m["files"]), len(m["files"])
                shutil.rmtree(out)
    med = _medians(samples)
    print(f"machine:  {_machine()}")
    print(f"inputs:   {' '.join(args.inputs)}")
    print(f"runtime:  {files} files, {size / 2**30:.2f} GiB; {args.rounds} rounds, medians over rounds 2.. (warm cache)")
    _rows(samples, med, 9)
    print(f"repair / cp -a: {med['repair'] / med['cp -a']:.2f}   repair / (cp -a + sha256): "
          f"{med['repair'] / med['cp+sha256']:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"samples": samples, "files": files, "bytes": size, "machine": _machine()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
