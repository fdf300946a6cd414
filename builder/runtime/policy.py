"""What a runtime carries and what it leaves to the host: data (builder/data/policy.toml), read here.

classify() answers for one soname; a recipe's [bundle] table overrides the
shipped policy except for the locked glibc entries.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from builder.errors import AssembleError
from builder.paths import builtin_data

POLICY_FILE = builtin_data("policy.toml")

BUNDLE, SYSTEM, NEVER = "bundle", "system", "never"


@dataclass(frozen=True)
class Rule:
    pattern: str      # soname glob
    decision: str     # bundle | system | never
    reason: str
    locked: bool = False


@dataclass(frozen=True)
class Companion:
    """A library another one loads with dlopen: found through the requester's strings."""
    library: str      # glob of the library that dlopens
    dlopens: str      # glob the dlopened soname must match
    required: bool
    reason: str


@dataclass(frozen=True)
class DataRule:
    """A data folder a library reads relative to its own directory."""
    library: str                  # glob of the library
    place: str                    # where it looks, relative to its directory
    versioned: str | None         # regex of a distribution's versioned variant, read from its strings
    marker: str                   # glob that must match inside the folder
    shadows: tuple[str, ...]      # probed before `place`: a stray folder there wins
    required: bool
    env: str | None
    reason: str


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]       # locked first, then never, system, bundle
    default_reason: str
    companions: tuple[Companion, ...]
    data: tuple[DataRule, ...]


def _fail(key: str, what: str, fix: str) -> AssembleError:
    return AssembleError(what, where=f"{POLICY_FILE}: {key}", fix=fix)


@lru_cache(maxsize=4)
def load_policy(path: Path = POLICY_FILE) -> Policy:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"cannot read the bundling policy ({exc})", where=str(path),
                            fix="reinstall assemble; the policy ships inside the package") from None
    rules: list[Rule] = []
    for table, decision in (("locked", NEVER), ("never", NEVER), ("system", SYSTEM), ("bundle", BUNDLE)):
        for pattern, reason in raw.get(table, {}).items():
            if not isinstance(reason, str) or not reason.strip():
                raise _fail(f"{table}.{pattern}", "needs a stated reason", f'write "{pattern}" = "why"')
            rules.append(Rule(pattern, decision, reason, locked=table == "locked"))
    companions = tuple(
        Companion(c["library"], c["dlopens"], bool(c.get("required", False)), c["reason"])
        for c in raw.get("companion", []))
    data = tuple(
        DataRule(library=d["library"], place=d["place"], versioned=d.get("versioned"), marker=d["marker"],
                 shadows=tuple(d.get("shadows", ())), required=bool(d.get("required", False)),
                 env=d.get("env"), reason=d["reason"])
        for d in raw.get("data", []))
    default = raw.get("defaults", {}).get("bundle", "carried")
    return Policy(tuple(rules), default, companions, data)


def _match(soname: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(soname, pattern)


def classify(soname: str, recipe: Any = None) -> tuple[str, str]:   # a Recipe, or repair's request: read by getattr
    """(decision, reason) for one soname: 'bundle' | 'system' | 'never'.

    recipe: a builder.recipe.Recipe whose bundle_never/bundle_always override
    the shipped policy (not the locked glibc entries: asking to bundle one is
    an error in the recipe).
    """
    policy = load_policy()
    for rule in policy.rules:
        if rule.locked and _match(soname, rule.pattern):
            if recipe is not None:
                for pattern, _ in getattr(recipe, "bundle_always", ()):
                    if _match(soname, pattern):
                        raise AssembleError(
                            f"bundle.always '{pattern}' asks to bundle {soname}, which is never bundled "
                            f"({rule.reason})", where=f"{recipe.path}: bundle.always.{pattern}",
                            fix="remove the entry; glibc always comes from the host")
            return NEVER, rule.reason
    if recipe is not None:
        for pattern, reason in getattr(recipe, "bundle_never", ()):
            if _match(soname, pattern):
                return NEVER, f"recipe {recipe.name}: {reason}"
        for pattern, reason in getattr(recipe, "bundle_always", ()):
            if _match(soname, pattern):
                return BUNDLE, f"recipe {recipe.name}: {reason}"
    for rule in policy.rules:
        if not rule.locked and _match(soname, rule.pattern):
            return rule.decision, rule.reason
    return BUNDLE, policy.default_reason


def companions_for(soname: str) -> tuple[Companion, ...]:
    return tuple(c for c in load_policy().companions if _match(soname, c.library))


def data_rules_for(soname: str) -> tuple[DataRule, ...]:
    return tuple(d for d in load_policy().data if _match(soname, d.library))
