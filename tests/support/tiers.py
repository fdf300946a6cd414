"""The suite's two tiers, decided by folder, and the guards that keep each test in its own.

tests/unit/ is the quick tier: no llama.cpp compile, no download (`-m "not slow"` runs it on every
core in about a minute). tests/integration/ and tests/e2e/ are the slow tier: every test there is
marked `slow`, whatever fixtures it uses, so a new heavy fixture needs no list to be updated.

A fixture or helper that compiles llama.cpp or downloads says so with @compiles or @downloads
(scripts/support/heavy.py, where the helpers shared with the scripts live too).
A quick-tier test that reaches one fails loudly: at collection when a fixture in its closure is
heavy, and when it runs when it calls a heavy helper. @downloads(warm=f) also waits for f in the
background prefetch (tests/support/prefetch.py) before it looks in the cache.
"""

from __future__ import annotations

import threading
from pathlib import Path
from collections.abc import Iterable

from scripts.support import heavy
from scripts.support.heavy import compiles, downloads, heavy_reason, warmup  # noqa: F401  (the suite's names)
from tests.support import prefetch

QUICK = "unit"
SLOW = ("integration", "e2e")

_running: Path | None = None       # the test running now (set by the conftest before its setup)
_tests_root: Path | None = None


class MisTiered(AssertionError):
    """A quick-tier test reached something that compiles llama.cpp or downloads."""


def configure(tests_root: Path) -> None:
    global _tests_root  # noqa: PLW0603 -- set once per session by the conftest
    _tests_root = tests_root.resolve()


def tier(path: Path) -> str:
    """'quick' under tests/unit/, 'slow' under tests/integration/ or tests/e2e/; anything else is a
    misplaced test file, refused with the fix."""
    assert _tests_root is not None, "tiers.configure() was not called"
    try:
        top = Path(path).resolve().relative_to(_tests_root).parts[0]
    except (ValueError, IndexError):
        top = ""
    if top == QUICK:
        return "quick"
    if top in SLOW:
        return "slow"
    raise MisTiered(f"{path}: a test outside tests/{QUICK}/ and tests/{{{','.join(SLOW)}}}/ -- fix: move it to "
                    f"tests/{QUICK}/ (no compile, no download) or tests/integration/<area>/")


def running(path: Path | None) -> None:
    global _running  # noqa: PLW0603 -- the test running now, set by the conftest
    _running = path


def _refuse_in_quick_tier(what: str) -> None:
    if threading.current_thread() is not threading.main_thread():
        return                     # the background prefetch, not a test
    if _running is not None and tier(_running) == "quick":
        raise MisTiered(f"{_running}: a quick-tier test {what} -- fix: move it to tests/integration/<area>/ "
                        f"(tests/support/tiers.py)")


# the marks live with the helpers (scripts/support/heavy.py: scripts never import tests); the suite
# installs its guard and the background prefetch's join into them here
heavy.guard = _refuse_in_quick_tier
heavy.join = prefetch.join


def misplaced(tests: Iterable[tuple[Path, str, Iterable[object]]]) -> list[str]:
    """One line per quick-tier test whose fixture closure holds a heavy fixture: (test path, its
    name, the fixture functions it will set up) in, 'name: uses a fixture that downloads (...)' out."""
    lines = []
    for path, name, funcs in tests:
        try:
            if tier(path) != "quick":
                continue
        except MisTiered:
            continue                     # a misplaced file: tier() says so once, with its own fix
        reasons = sorted({r for r in map(heavy_reason, funcs) if r})
        if reasons:
            lines.append(f"{name}: uses a fixture that {'; '.join(reasons)} -- fix: move it to "
                         "tests/integration/<area>/")
    return lines
