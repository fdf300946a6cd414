#!/usr/bin/env python3
"""Cold build vs a build on another machine through a shared Redis cache (issue 19's goal:
B <= 20% of A's cold time, >= 95% remote hits).

    python3 scripts/bench-remote-cache.py [--recipe cpu] [--out results.json]

Starts Debian's redis-server on 127.0.0.1, builds the recipe on "machine A" (fresh HOME, checkout
path and ccache: a cold compile that fills the cache), deletes A, then builds on "machine B" (another
fresh HOME and path: only the remote cache is warm). Prints both times, their ratio and the hit
counts each build's manifest records. The machines are scripts/support/remotecache.py's, as the
test uses them.

Keep a run's numbers with --out docs/results/<machine>-<date>/bench-remote-cache.json, then run scripts/figures:
docs/figures.md, the one place figures are quoted, gets their rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.support.remotecache import build_on, machine, redis_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", default="cpu")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-remote-cache-") as tmp:
        root = Path(tmp)
        with redis_server(root / "redis") as url:
            a, b = machine(root, "a", args.recipe), machine(root, "b", args.recipe)
            cold, stats_a, _ = build_on(a, url)
            shutil.rmtree(a.home)
            warm, stats_b, _ = build_on(b, url)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    print(f"machine: {cpu} ({os.cpu_count()} cores); recipe {args.recipe}")
    print(f"  A, cold:              {cold:7.1f} s   {stats_a}")
    print(f"  B, remote cache only: {warm:7.1f} s   {stats_b}")
    print(f"  B / A: {warm / cold:.3f}   remote hits on B: {stats_b['remote_hits']}/{stats_b['compiles']}")
    if args.out:
        args.out.write_text(json.dumps({"recipe": args.recipe, "cpu": cpu, "cores": os.cpu_count(),
                                        "cold_seconds": cold, "warm_seconds": warm, "a": stats_a, "b": stats_b},
                                       indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
