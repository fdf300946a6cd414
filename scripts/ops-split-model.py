#!/usr/bin/env python3
"""What another split of a device's cases would give, estimated from one kept run (a model, not a measurement).

    python3 scripts/ops-split-model.py FOLDER [--processes 16] [--rounds 2,4,8] [--start 1.6]
        [--price kind|string] [--op-cost OP=MS,...]

FOLDER is what `bench-ops.py --together --keep` left for one device: list-0.out (the program's list) and
shard-K.out (each case with its test_time). Each case's cost is the mean per case of its op and type fields in
that run (--price kind), or what the case itself was charged there (--price string: keeps the few cases that
took seconds each where their process compiled a pipeline, which a mean smooths away), charged as
scripts/ops-timeline.py charges them (scripts/support/opstime.py). Each split verify can make
(builder/check/opshares.range_runs, sized by count or by weight: OP_COST_MS, with --op-cost's values in place of
its own) is then played as verify plays it: the runs in order, each started on the first slot free,
`--start` seconds before its first case. It prints when the last slot ends, the spread of the slots' ends and
the longest run. A third row per round count sizes the runs by the model's own price of each case: verify's cut
rule as it would split with every case's cost known in advance. That is a guide to what better weights could
buy, not a bound: the rule cuts ranges of the sorted strings at the first string past each share, so a heavy
case next to a cut can still make one run longer than a cruder weight would.

What it leaves out: a case costs more where its process compiles the pipelines it needs, so a case's mean is a
poor guess for one run. On the H100 (2026-12-05), over five other kept runs, such means were off by up to 2.5
times per process; yet for 16 fixed shares of 4 runs cut by cost it gave 53 s for the slowest process, and
the run's slowest ran 54 s from its first case to its last. The list (about 4 s there) is left out too.
docs/lab/2026-12-02-ops-h200.md quotes its output.
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
from builder.check.opshares import range_runs  # noqa: E402
from scripts.support.opstime import charge  # noqa: E402

_FIELD = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]*)")


def kind(op: str, params: str) -> str:
    """A case's op and the values of its type fields: "MUL_MAT f16 f32"."""
    return " ".join((op, *(v for n, v in _FIELD.findall(params) if n.startswith("type"))))


def _op_costs(text: str) -> dict[str, float]:
    """--op-cost's OP=MS pairs."""
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if any(len(pair) != 2 for pair in pairs):
        raise SystemExit(f"--op-cost: give OP=MS pairs separated by commas, not {text!r}")
    try:
        return {op: float(ms) for op, ms in pairs}
    except ValueError:
        raise SystemExit(f"--op-cost: each weight is a number of milliseconds: {text!r}") from None


def played(loads: list[float], slots: int, start: float) -> list[float]:
    """When each slot ends if the runs (their seconds, in order) start on the first slot free, as ops._run_all
    starts them."""
    ends = [0.0] * min(slots, len(loads))
    for load in loads:
        k = ends.index(min(ends))
        ends[k] += start + load
    return ends


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--processes", type=int, default=16)
    ap.add_argument("--rounds", default="2,4,8", help="rounds of runs (ops.ROUNDS)")
    ap.add_argument("--start", type=float, default=1.6, help="seconds a process takes to its first case "
                    "(1.6 s for one on the H100, 2026-12-05)")
    ap.add_argument("--price", choices=("kind", "string"), default="kind",
                    help="a case's cost: the mean of its op and type fields in the run, or its own charge there")
    ap.add_argument("--op-cost", default="", metavar="OP=MS,...",
                    help="weights to size the runs with in place of OP_COST_MS's for these ops")
    args = ap.parse_args(argv)
    op_cost = {**OP_COST_MS, **_op_costs(args.op_cost)}
    key = kind if args.price == "kind" else (lambda op, params: f"{op} {params}")
    spent = charge(args.folder, lambda row: key(row["op_name"], row.get("op_params", ""))
                   if row.get("supported") == "1" else None)
    listed = [c for c in parse_sql((args.folder / "list-0.out").read_text(errors="replace"), "support").cases
              if c.supported]
    price: Counter[str] = Counter()
    weight: dict[str, float] = {}
    for c in listed:
        price[c.params] += spent.per_case(key(c.op, c.params))
        weight[c.params] = weight.get(c.params, 0.0) + op_cost.get(c.op, MEAN_CASE_MS)
    strings = [c.params for c in listed]
    print(f"{len(listed)} listed cases, {sum(price.values()):.0f} process-seconds by the model")
    listed_strings = set(strings)
    for rounds in (int(r) for r in args.rounds.split(",")):
        for how, cost in (("by count", None), ("by weight", weight), ("by its price", dict(price))):
            patterns = [re.compile(p) for p in range_runs(strings, args.processes, rounds, cost) or []]
            loads = [sum(price[s] for s in listed_strings if p.search(s)) for p in patterns]
            ends = played(loads, args.processes, args.start)
            print(f"  {args.processes} at once, {rounds} rounds ({len(loads)} runs), sized {how:14} "
                  f"last slot ends {max(ends):5.0f}s, first {min(ends):5.0f}s, longest run {max(loads):4.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
