"""Which DLLs a Windows runtime leaves to the host, and why: builder/data/windows.toml, read here."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

from builder.errors import AssembleError
from builder.paths import builtin_data

POLICY_FILE = builtin_data("windows.toml")
KINDS = ("driver", "system", "redist")         # the order the tables are consulted in


@dataclass(frozen=True)
class HostRule:
    kind: str          # driver | system | redist
    glob: str
    reason: str


@lru_cache(maxsize=1)
def _rules() -> tuple[HostRule, ...]:
    try:
        raw = tomllib.loads(POLICY_FILE.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"the Windows DLL policy is unreadable ({exc})", where=str(POLICY_FILE),
                            fix="reinstall assemble") from None
    unknown = sorted(set(raw) - set(KINDS))
    if unknown:
        raise AssembleError(f"unknown table [{unknown[0]}]", where=str(POLICY_FILE), fix=f"use {', '.join(KINDS)}")
    return tuple(HostRule(kind, glob.lower(), reason) for kind in KINDS for glob, reason in raw.get(kind, {}).items())


def host_rule(dll: str) -> HostRule | None:
    """The first rule naming this DLL (case-insensitive), or None: the runtime must carry it."""
    name = dll.lower()
    return next((r for r in _rules() if fnmatchcase(name, r.glob)), None)
