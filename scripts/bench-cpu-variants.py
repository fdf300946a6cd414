#!/usr/bin/env python3
"""CPU speed of an all-variants runtime: the loader's choice against one level forced.

    python3 scripts/bench-cpu-variants.py RUNTIME [--model M.gguf] [-p 256] [-n 32] [-r 5] [--rounds 1]
                                          [--level NAME ...] [--also OTHER_RUNTIME ...] [--out results.json]

RUNTIME is an all-variants runtime (bin/libggml-cpu-<level>.so). Measured with its own bundled
llama-bench, CPU only (-ngl 0 -dev none), empty environment:
  shipped       the runtime as it is: ggml's loader picks the variant
  only <best>   a copy holding only the best level this CPU runs (the others deleted)
  only haswell  a copy holding only haswell, the single level runtimes shipped before (AVX2)
plus each --level NAME and each --also runtime (e.g. an older single-level build) as given.
Configurations alternate within each round; medians are over every repetition of every round,
and the ratios (shipped / best, haswell / best) come from this one run.

Without --model a random-weight llama is generated (builder/check/tinymodel.py, ~170M
parameters, Q4_0) and cached: the kernels are the real ones, but its shape is not a real
model's, so the numbers say how the levels compare, not what a real model gets. Pass --model.

Keep a run's numbers with --out docs/results/<machine>-<date>/cpu-variants.json, then run scripts/figures:
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
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from builder.check import cpuvariant                            # noqa: E402
from builder.check.tinymodel import ModelShape, write_tiny_llama  # noqa: E402
from builder.config import cpulevels                            # noqa: E402

# ~170M parameters: big enough that pp and tg run the matrix kernels, small enough for 2 cores.
BENCH_SHAPE = ModelShape(n_layer=12, n_embd=1024, n_head=16, n_head_kv=4, n_ff=2816, n_ctx=2048,
                         n_vocab_words=16000)
HASWELL = "haswell"


@dataclass(frozen=True)
class Config:
    label: str
    runtime: Path
    module: str               # the CPU module it loads (seen by ld.so), or why none


def machine() -> str:
    name, physical = platform.processor() or "unknown CPU", set()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    phys = core = None
    for line in info.splitlines():
        key, _, value = (s.strip() for s in line.partition(":"))
        if key == "model name":
            name = value
        elif key == "physical id":
            phys = value
        elif key == "core id":
            core = value
            physical.add((phys, core))
    cores = f"{len(physical)} cores, " if physical else ""
    return f"{name} ({cores}{os.cpu_count()} logical CPUs), {platform.machine()}, Linux {platform.release()}"


def default_model(cache: Path, quant: str) -> Path:
    path = cache / f"bench-llama-{BENCH_SHAPE.params() // 1_000_000}M-{quant}.gguf"
    if not path.is_file():
        print(f"generating {path.name} (random weights) ...", file=sys.stderr, flush=True)
        write_tiny_llama(path, BENCH_SHAPE, dtype=quant)
    return path


def only_level(runtime: Path, level: str, work: Path) -> Path:
    """A copy of `runtime` whose bin/ holds the CPU variant `level` alone."""
    dest = work / f"only-{level}"
    shutil.copytree(runtime, dest, symlinks=True)
    for name in cpuvariant.shipped_modules(dest):
        if name != f"libggml-cpu-{level}.so":
            (dest / "bin" / name).unlink()
    return dest


def llama_bench(runtime: Path, model: Path, a, cwd: Path) -> list[dict]:
    argv = [str(runtime / "bin" / "llama-bench"), "-m", str(model), "-p", str(a.p), "-n", str(a.n),
            "-r", str(a.r), "-ngl", "0", "-dev", "none", "-o", "jsonl", *(["-t", str(a.threads)] if a.threads else [])]
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    proc = subprocess.run(argv, env={}, cwd=cwd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"llama-bench failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]


def test_name(row: dict) -> str:
    return f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runtime", type=Path, help="an all-variants runtime folder")
    ap.add_argument("--model", type=Path, help="a GGUF (default: a generated random-weight llama, not representative)")
    ap.add_argument("--quant", default="q4_0", choices=("q4_0", "q8_0", "f16"), help="of the generated model")
    ap.add_argument("-p", type=int, default=256, help="prompt tokens (pp)")
    ap.add_argument("-n", type=int, default=32, help="generated tokens (tg)")
    ap.add_argument("-r", type=int, default=5, help="llama-bench repetitions per round (>= 5 for the medians)")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of the configurations")
    ap.add_argument("--threads", type=int, help="llama-bench -t (default: its own, the physical cores)")
    ap.add_argument("--level", action="append", default=[], help="another level to force (repeatable)")
    ap.add_argument("--also", action="append", type=Path, default=[], help="another runtime to measure as it is")
    ap.add_argument("--out", type=Path, help="write every sample as JSON")
    a = ap.parse_args()
    runtime = a.runtime.resolve()
    shipped = tuple(v for n in cpuvariant.shipped_modules(runtime) if (v := cpulevels.variant_of(n)))
    flags = cpulevels.host_cpu_flags()
    best = cpulevels.best_level(flags, shipped)
    if best is None:
        raise SystemExit(f"{runtime}: no CPU variant this CPU runs among {shipped or 'none'} "
                         "(an all-variants runtime?)")
    if a.r < 5:
        print(f"note: -r {a.r} < 5: the medians are over few samples", file=sys.stderr)

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "assemble-bench"
    cache.mkdir(parents=True, exist_ok=True)
    model = a.model.resolve() if a.model else default_model(cache, a.quant)

    with tempfile.TemporaryDirectory(prefix="bench-cpu-variants.") as tmp:
        work = Path(tmp)
        cwd = work / "cwd"
        cwd.mkdir()
        forced = [best.name] + [lv for lv in [HASWELL, *a.level] if lv != best.name]
        plan = [("shipped", runtime)]
        for lv in dict.fromkeys(forced):
            level = cpulevels.level(lv)
            if lv not in shipped or level is None or not level.runs_on(flags):
                print(f"note: only {lv} left out: not shipped, or this CPU cannot run it", file=sys.stderr)
                continue
            plan.append((f"only {lv}", only_level(runtime, lv, work)))
        plan += [(f"also {p.name}", p.resolve()) for p in a.also]
        configs = []
        for label, path in plan:
            module, why = cpuvariant.loaded_cpu_module(path, {})
            configs.append(Config(label, path, module or f"({why})"))

        samples: dict[tuple[str, str], list[float]] = {}
        threads = set()
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        load_before = os.getloadavg()[0]
        for _ in range(a.rounds):
            for c in configs:
                for row in llama_bench(c.runtime, model, a, cwd):
                    samples.setdefault((c.label, test_name(row)), []).extend(row.get("samples_ts") or [row["avg_ts"]])
                    threads.add(row.get("n_threads"))

    tests = sorted({t for _, t in samples}, key=lambda t: (not t.startswith("pp"), t))
    med = {k: statistics.median(v) for k, v in samples.items()}
    top = {k: max(v) for k, v in samples.items()}     # the least disturbed sample, for a busy machine
    ref = f"only {best.name}"
    print(f"machine:  {machine()}")
    print(f"runtime:  {runtime} ({len(shipped)} CPU levels; best for this CPU: {best.name})")
    print(f"model:    {model}" + ("" if a.model else f" (generated: random weights, {BENCH_SHAPE.params() / 1e6:.0f}M "
                                  f"parameters, {a.quant.upper()}; not a real model's shape, pass --model)"))
    print(f"llama-bench -p {a.p} -n {a.n} -r {a.r} -ngl 0 -dev none, threads {sorted(threads)}, "
          f"{a.rounds} round(s), started {started}; medians over {a.r * a.rounds} samples, tokens/s")
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print()
    head = f"{'configuration':22s} {'CPU module loaded':32s}" + "".join(f"{t:>12s}" for t in tests) \
        + "".join(f"{t + ' / best':>14s}" for t in tests)
    print(head)
    print("-" * len(head))
    for c in configs:
        cells = "".join(f"{med.get((c.label, t), float('nan')):12.2f}" for t in tests)
        ratios = "".join(f"{med[(c.label, t)] / med[(ref, t)]:14.3f}" if (c.label, t) in med and (ref, t) in med
                         else f"{'-':>14s}" for t in tests)
        print(f"{c.label:22s} {c.module:32s}{cells}{ratios}")
    print()
    print("spread (min-max of the samples; a wide one means other work shared the cores):")
    for c in configs:
        print(f"  {c.label:20s} " + ", ".join(f"{t} {min(samples[(c.label, t)]):.0f}-{max(samples[(c.label, t)]):.0f}"
                                            for t in tests if (c.label, t) in samples))
    print()
    for label in ("shipped", f"only {HASWELL}"):
        if (label, tests[0]) in med and label != ref:
            print(f"{label} / best ({best.name}): " + ", ".join(
                f"{t} {med[(label, t)] / med[(ref, t)]:.3f} (fastest samples {top[(label, t)] / top[(ref, t)]:.3f})"
                for t in tests))
    if a.out:
        a.out.write_text(json.dumps({"machine": machine(), "runtime": str(runtime), "model": str(model),
                                     "best": best.name, "configs": [c.__dict__ | {"runtime": str(c.runtime)}
                                                                    for c in configs],
                                     "samples": {f"{k[0]} {k[1]}": v for k, v in samples.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
