"""Versions and version constraints, one grammar for all: a recipe's `[cuda] toolkit` and a
patch's `when.cuda_toolkit` are read and compared here, so a constraint means one thing.

    ">=12.4,<13"   every clause must hold (comma means and)
    "==12.8"       compared on the parts it names: 12.8, 12.8.1 and 12.8.93 satisfy it; 13 == 13.0
    "12.8"         a bare version means ==
"""

from __future__ import annotations

import re

CONSTRAINT_FORMS = '">=13", "==12.8" or ">=12.4,<13" (comma means and)'
_CLAUSE = re.compile(r"(==|!=|>=|<=|>|<)?\s*(\d+(?:\.\d+){0,2})")


def version_tuple(v: str) -> tuple[int, ...]:
    """The leading numbers of a version as a tool prints it: "V12.8.61" -> (12, 8, 61)."""
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def parse_constraint(spec: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """">=12.4,<13" -> ((">=", (12, 4)), ("<", (13,))); ValueError naming the clause that is not one."""
    out = []
    for clause in (spec.split(",") if isinstance(spec, str) else [repr(spec)]):
        m = _CLAUSE.fullmatch(clause.strip())
        if not m:
            raise ValueError(f"{clause.strip()!r} is not a comparison like >=13 or <12.8")
        out.append((m.group(1) or "==", tuple(int(x) for x in m.group(2).split("."))))
    return tuple(out)


def satisfies(version: str, spec: str) -> bool:
    """Does a version ("12.8", "V12.8.61") meet the constraint? ValueError for a malformed one."""
    have = version_tuple(version)
    for op, want in parse_constraint(spec):
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        if op in ("==", "!="):          # on the parts the constraint names
            a, b = a[:len(want)], want
        if not {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]:
            return False
    return True
