#!/usr/bin/env python3
"""What another split of a device's cases would give, estimated from one kept run (a model, not a measurement).

    python3 scripts/ops-split-model.py FOLDER [--processes 16] [--runs 2,4,8]

FOLDER is what `bench-ops.py --together --keep` left for one device: list-0.out (the program's list) and
shard-K.out (each case with its test_time). Each case's cost is the mean per case of its op and type fields in
that run (charged as scripts/ops-timeline.py charges them: scripts/support/opstime.py); each split
verify can make (builder/check/opshares.range_shares, cut by count or by OP_COST_MS) is then priced per
process. It leaves out what a split changes beyond the cases' order: pipeline compiles a process repeats when
a kind of case lands in more processes (on the H100, 8 runs per process measured 2.5 s slower than 4, where this
model said faster), each process's start and the list. docs/lab/2026-12-02-ops-h200.md quotes its output.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from builder.check.ops import MEAN_CASE_MS, OP_COST_MS, parse_sql  # noqa: E402
from builder.check.opshares import range_shares  # noqa: E402
from scripts.support.opstime import charge  # noqa: E402

_FIELD = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")


def kind(op: str, params: str) -> str:
    """A case's op and the values of its type fields: "MUL_MAT f16 f32"."""
    return " ".join((op, *(v for n, v in _FIELD.findall(params) if n.startswith("type"))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--processes", type=int, default=16)
    ap.add_argument("--runs", default="2,4,8")
    args = ap.parse_args(argv)
    spent = charge(args.folder, lambda row: kind(row["op_name"], row.get("op_params", ""))
                   if row.get("supported") == "1" else None)
    listed = [c for c in parse_sql((args.folder / "list-0.out").read_text(errors="replace"), "support").cases
              if c.supported]
    price: Counter[str] = Counter()
    weight: dict[str, float] = {}
    for c in listed:
        price[c.params] += spent.per_case(kind(c.op, c.params))
        weight[c.params] = weight.get(c.params, 0.0) + OP_COST_MS.get(c.op, MEAN_CASE_MS)
    strings = [c.params for c in listed]
    print(f"{len(listed)} listed cases, {sum(price.values()):.0f} process-seconds by the model")
    for runs in (int(r) for r in args.runs.split(",")):
        for how, cost in (("by count", None), ("by OP_COST_MS", weight)):
            patterns = [re.compile(p) for p in range_shares(strings, args.processes, runs, cost) or []]
            load = [sum(price[s] for s in set(strings) if p.search(s)) for p in patterns]
            print(f"  {args.processes} processes x {runs} runs, cut {how:14} slowest {max(load):5.0f}s, "
                  f"fastest {min(load):5.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
