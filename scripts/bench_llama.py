#!/usr/bin/env python3
"""llama-bench driver for the hardware acceptance runs: bundled runtime vs raw build tree.

  bench_llama.py parity --bundled RUNTIME --raw BUILD_BIN --model M --dev CUDA0 [--dev Vulkan0 ...]
                 [--alternations 3] [--reps 3] [--env K=V ...] --out results.json
  bench_llama.py run --bin BIN_DIR --model M --dev CUDA0/Vulkan0 [--ts 1/1] [--depth 0,4096] ...

Runs llama-bench with an empty environment (plus --env), parses its JSON lines, and
prints medians and bundled/raw ratios per device and test. Public tools only: what it
runs is printed, so a maintainer can repeat any single measurement by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def llama_bench(bin_dir: Path, model: str, dev: str, env: dict, reps: int, depths: str,
                extra: list[str]) -> list[dict]:
    argv = [str(bin_dir / "llama-bench"), "-m", model, "-dev", dev, "-ngl", "99", "-p", "512", "-n", "128",
            "-d", depths, "-r", str(reps), "-o", "jsonl", *extra]
    print("$ " + " ".join(argv), file=sys.stderr, flush=True)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"llama-bench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return [{"dev": dev, "test": f"{'pp' if r['n_prompt'] else 'tg'}{r['n_prompt'] or r['n_gen']}"
                                 f"@d{r.get('n_depth', 0)}",
             "avg_ts": r["avg_ts"], "samples_ts": r.get("samples_ts"), "devices": r.get("devices", r.get("dev"))}
            for r in rows]


def env_of(pairs: list[str]) -> dict:
    return dict(p.split("=", 1) for p in pairs)


def parity(a) -> dict:
    env = env_of(a.env)
    results = []
    for i in range(a.alternations):
        for label, bindir in (("bundled", Path(a.bundled) / "bin"), ("raw", Path(a.raw))):
            for dev in a.dev:
                for row in llama_bench(bindir, a.model, dev, env, a.reps, a.depth, a.extra):
                    results.append({**row, "build": label, "round": i})
    summary = {}
    for dev in a.dev:
        for test in sorted({r["test"] for r in results if r["dev"] == dev}):
            med = {b: statistics.median(r["avg_ts"] for r in results if r["dev"] == dev and r["test"] == test
                                        and r["build"] == b) for b in ("bundled", "raw")}
            summary[f"{dev} {test}"] = {"bundled_ts": round(med["bundled"], 2), "raw_ts": round(med["raw"], 2),
                                        "ratio": round(med["bundled"] / med["raw"], 4)}
    return {"kind": "parity", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": results, "summary": summary}


def run(a) -> dict:
    env = env_of(a.env)
    rows = []
    for dev in a.dev:
        extra = list(a.extra) + (["-ts", a.ts] if a.ts else []) + (["-sm", a.sm] if a.sm else [])
        rows += llama_bench(Path(a.bin), a.model, dev, env, a.reps, a.depth, extra)
    return {"kind": "run", "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("parity", "run"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True)
        s.add_argument("--dev", action="append", required=True)
        s.add_argument("--env", action="append", default=[])
        s.add_argument("--reps", type=int, default=3)
        s.add_argument("--depth", default="0,4096")
        s.add_argument("--extra", action="append", default=[])
        s.add_argument("--out", required=True)
    sub.choices["parity"].add_argument("--bundled", required=True)
    sub.choices["parity"].add_argument("--raw", required=True)
    sub.choices["parity"].add_argument("--alternations", type=int, default=3)
    sub.choices["run"].add_argument("--bin", required=True)
    sub.choices["run"].add_argument("--ts")
    sub.choices["run"].add_argument("--sm")
    a = p.parse_args()
    result = parity(a) if a.cmd == "parity" else run(a)
    Path(a.out).write_text(json.dumps(result, indent=1))
    for k, v in result.get("summary", {}).items():
        print(f"{k:28s} bundled {v['bundled_ts']:10.2f} t/s  raw {v['raw_ts']:10.2f} t/s  ratio {v['ratio']:.4f}")
    for r in result.get("rows", []):
        print(f"{r['dev']:20s} {r['test']:14s} {r['avg_ts']:10.2f} t/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
