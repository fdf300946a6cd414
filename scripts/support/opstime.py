"""Where a kept test-backend-ops run's time went: the one charging rule scripts/ops-timeline.py reports and
scripts/ops-split-model.py prices splits with.

A kept run (bench-ops.py --keep) holds one shard-K.out per process, each case with its test_time, to the
second. Per process, each second between two printed cases is charged to the cases printed in the later one,
evenly. A coarse model: a case that straddles seconds is charged where it ended, and a killed process's last
buffered cases are missing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from builder.check.ops import sql_rows


@dataclass
class Charges:
    """Process-seconds and cases per key, and when each process printed its first and last case."""
    seconds: Counter[str] = field(default_factory=Counter)
    cases: Counter[str] = field(default_factory=Counter)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def per_case(self, key: str) -> float:
        return self.seconds[key] / self.cases[key] if self.cases[key] else 0.0


def charge(folder: Path, key: Callable[[dict[str, str]], str | None]) -> Charges:
    """Charge every test-mode case of the kept run in `folder` to key(row) (None: left out, its time too)."""
    charges = Charges()
    for out in sorted(folder.glob("shard-*.out")):
        rows = [r for r in sql_rows(out.read_text(errors="replace")) if r and r.get("test_mode") == "test"]
        if not rows:
            continue
        by_second: dict[float, list[str | None]] = defaultdict(list)
        for row in rows:
            by_second[datetime.fromisoformat(row["test_time"]).timestamp()].append(key(row))
        seconds = sorted(by_second)
        charges.starts.append(seconds[0])
        charges.ends.append(seconds[-1])
        previous = None
        for second in seconds:
            span = second - previous if previous is not None else 1.0
            for k in by_second[second]:
                if k is not None:
                    charges.seconds[k] += span / len(by_second[second])
                    charges.cases[k] += 1
            previous = second
    return charges
