"""The Python versions assemble runs on. One home: pyproject.toml's `requires-python`, read from
the checkout's pyproject.toml beside the package, else from the installed distribution's metadata
(a wheel has no pyproject.toml; its METADATA carries the same field)."""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_FLOOR = re.compile(r">=\s*(\d+(?:\.\d+)*)")


@cache
def requires_python() -> str:
    """The specifier, e.g. ">=3.11"."""
    try:
        with _PYPROJECT.open("rb") as f:
            project = tomllib.load(f).get("project", {})
        if project.get("name") == "assemble" and project.get("requires-python"):
            return str(project["requires-python"])
    except (OSError, tomllib.TOMLDecodeError):
        pass
    from importlib import metadata           # here: it loads the email package, which the CLI rarely needs
    return metadata.metadata("assemble")["Requires-Python"]


def floor() -> tuple[int, ...]:
    """The oldest Python supported, e.g. (3, 11)."""
    m = _FLOOR.search(requires_python())
    if not m:
        raise ValueError(f"requires-python {requires_python()!r} names no lower bound")
    return tuple(int(p) for p in m.group(1).split("."))
