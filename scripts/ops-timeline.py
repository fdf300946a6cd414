#!/usr/bin/env python3
"""Where a test-backend-ops run's time went, from the raw output bench-ops.py --keep leaves.

    python3 scripts/ops-timeline.py FOLDER [--by FIELD] [--top N]

FOLDER holds one run's shard-K.out files (`--output sql`, one INSERT per case with its test_time, to the
second). Per process, each second between two printed cases is charged to the cases printed in the later
one, evenly; summed over processes this is process-seconds per op, or per op and value of one params field
(--by hsk, --by type_a, ...). Cases not supported count (they cost little). A coarse model: a case that
straddles seconds is charged where it ended, and a killed process's last buffered cases are missing.
docs/lab/2026-12-02-ops-h200.md quotes its output with the machine.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from builder.check.ops import sql_rows  # noqa: E402  (the one reader of test-backend-ops' SQL lines)


def cases(out: Path) -> list[tuple[float, str, str]]:
    """(time, op, params) of each test-mode case in one shard's output."""
    return [(datetime.fromisoformat(row["test_time"]).timestamp(), row["op_name"], row.get("op_params", ""))
            for row in sql_rows(out.read_text(errors="replace")) if row and row.get("test_mode") == "test"]


def key_of(op: str, params: str, by: str | None) -> str:
    if not by:
        return op
    m = re.search(rf"(?:^|,){re.escape(by)}=(\[[^\]]*\]|[^,]*)", params)
    return f"{op}:{m.group(1) if m else '-'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--by", help="also split by this params field (hsk, type_a, n, ...)")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args(argv)
    cost: Counter[str] = Counter()
    count: Counter[str] = Counter()
    starts, ends = [], []
    for out in sorted(args.folder.glob("shard-*.out")):
        rows = cases(out)
        if not rows:
            continue
        starts.append(rows[0][0])
        ends.append(rows[-1][0])
        by_second: dict[float, list[str]] = defaultdict(list)
        for when, op, params in rows:
            by_second[when].append(key_of(op, params, args.by))
        previous = None
        for second in sorted(by_second):
            span = second - previous if previous is not None else 1.0
            for key in by_second[second]:
                cost[key] += span / len(by_second[second])
                count[key] += 1
            previous = second
    if not starts:
        print(f"{args.folder}: no test-mode case found")
        return 1
    t0 = min(starts)
    print(f"{len(starts)} processes, {sum(count.values())} cases, {sum(cost.values()):.0f} process-seconds; "
          f"first cases {min(starts) - t0:.0f}-{max(starts) - t0:.0f}s, last at {max(ends) - t0:.0f}s")
    for key, seconds in cost.most_common(args.top):
        print(f"  {key:40} {seconds:7.1f}s {count[key]:6} cases {1000 * seconds / count[key]:8.1f} ms/case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
