#!/usr/bin/env python3
"""Where a test-backend-ops run's time went, from the raw output bench-ops.py --keep leaves.

    python3 scripts/ops-timeline.py FOLDER [--by FIELD] [--top N]

FOLDER holds one run's shard-K.out files; each second between two printed cases of a process is charged to
the cases printed in the later one (scripts/support/opstime.py). Summed over processes this is process-seconds
per op, or per op and value of one params field (--by hsk, --by type_a, ...). Cases not supported count (they
cost little). docs/lab/2026-12-02-ops-h200.md quotes its output with the machine.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.support.opstime import charge  # noqa: E402


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
    spent = charge(args.folder, lambda row: key_of(row["op_name"], row.get("op_params", ""), args.by))
    if not spent.starts:
        print(f"{args.folder}: no test-mode case found")
        return 1
    t0 = min(spent.starts)
    print(f"{len(spent.starts)} processes, {sum(spent.cases.values())} cases, {sum(spent.seconds.values()):.0f} "
          f"process-seconds; first cases {min(spent.starts) - t0:.0f}-{max(spent.starts) - t0:.0f}s, "
          f"last at {max(spent.ends) - t0:.0f}s")
    for key, seconds in spent.seconds.most_common(args.top):
        print(f"  {key:40} {seconds:7.1f}s {spent.cases[key]:6} cases {1000 * spent.per_case(key):8.1f} ms/case")
    return 0


if __name__ == "__main__":
    sys.exit(main())
