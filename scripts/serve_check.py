#!/usr/bin/env python3
"""Start llama-server from a runtime with given arguments, send a real request, record what happened.

  serve_check.py --runtime DIR --model M --args "-dev CUDA0,Vulkan0 -sm layer -ngl 99" [--env K=V]
                 [--sample-gpu-memory] --out result.json

Used by scripts/h200-acceptance.sh; an abort (for an arrangement llama.cpp cannot
express) is recorded with the server's last log lines, not hidden.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from builder.check.dynamic import smoke


def gpu_memory(_pid: int) -> dict:
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return {"gpu_memory_used_mib": {ln.split(",")[0].strip(): int(ln.split(",")[1]) for ln in out.splitlines() if "," in ln}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--args", required=True)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--sample-gpu-memory", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    env = dict(e.split("=", 1) for e in a.env)
    before = gpu_memory(0) if a.sample_gpu_memory else {}
    result = smoke(Path(a.runtime), Path(a.model), shlex.split(a.args), env, timeout=600,
                   while_loaded=gpu_memory if a.sample_gpu_memory else None)
    record = {"args": a.args, "ok": result.error is None, **asdict(result), "before": before}
    Path(a.out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))
    return 0 if result.error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
