"""The one result type of every check: `verify` (is this runtime whole and working here?) and
`doctor` (can this host build that recipe?) both produce Checks and render Reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASS, FAIL, WARN, SKIP, INFO = "pass", "fail", "warn", "skip", "info"
STATUSES = (PASS, FAIL, WARN, SKIP, INFO)


@dataclass(frozen=True)
class Check:
    name: str
    status: str        # pass | fail | warn | skip (could not run here: never a pass) | info
    reason: str        # what was found
    hint: str = ""     # how to fix it (shown for fail and warn)
    meaning: str = ""  # what it means for a build (doctor's rows)
    section: str = ""  # doctor: "host" or "recipe"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason, "hint": self.hint}


@dataclass(frozen=True)
class Report:
    subject: str                     # the runtime folder, or the host
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"runtime": self.subject, "passed": self.passed, "checks": [c.as_dict() for c in self.checks]}
