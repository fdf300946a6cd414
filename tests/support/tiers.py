"""The suite's two tiers, decided by folder, and the guards that keep each test in its own.

tests/unit/ is the quick tier: no llama.cpp compile, no download (`-m "not slow"` runs it on every
core in about a minute). tests/integration/ and tests/e2e/ are the slow tier: every test there is
marked `slow`, whatever fixtures it uses, so a new heavy fixture needs no list to be updated.

A fixture or helper that compiles llama.cpp or downloads says so with @compiles or @downloads.
A quick-tier test that reaches one fails loudly: at collection when a fixture in its closure is
heavy, and when it runs when it calls a heavy helper. @downloads(warm=f) also waits for f in the
background prefetch (tests/support/prefetch.py) before it looks in the cache.
"""

from __future__ import annotations

import functools
import inspect
import threading
from pathlib import Path
from typing import Callable, Iterable

from tests.support import prefetch

QUICK = "unit"
SLOW = ("integration", "e2e")
_ATTR = "_assemble_heavy"          # what the decorators set: the heavy thing's one-line description

_running: Path | None = None       # the test running now (set by the conftest before its setup)
_tests_root: Path | None = None


class MisTiered(AssertionError):
    """A quick-tier test reached something that compiles llama.cpp or downloads."""


def configure(tests_root: Path) -> None:
    global _tests_root
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
    global _running
    _running = path


def heavy_reason(obj: object) -> str | None:
    """What makes a fixture function or helper heavy, None when it is not."""
    return getattr(obj, _ATTR, None)


def _refuse_in_quick_tier(what: str) -> None:
    if threading.current_thread() is not threading.main_thread():
        return                     # the background prefetch, not a test
    if _running is not None and tier(_running) == "quick":
        raise MisTiered(f"{_running}: a quick-tier test {what} -- fix: move it to tests/integration/<area>/ "
                        f"(tests/support/tiers.py)")


def _heavy(reason: str, before: Callable[[], None] = lambda: None) -> Callable:
    def decorate(fn: Callable) -> Callable:
        label = f"{reason} ({fn.__qualname__})"
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                _refuse_in_quick_tier(label)
                before()
                yield from fn(*args, **kwargs)
        else:
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                _refuse_in_quick_tier(label)
                before()
                return fn(*args, **kwargs)
        setattr(wrapper, _ATTR, label)
        return wrapper
    return decorate


compiles = _heavy("compiles llama.cpp")


def downloads(fn: Callable | None = None, *, warm: Callable[[], object] | None = None) -> Callable:
    """@downloads, or @downloads(warm=f): f (no arguments) fills the cache this fixture reads, and the
    background prefetch runs it while the first build compiles."""
    def join() -> None:
        if warm is not None:
            prefetch.join(warm)

    def decorate(f: Callable) -> Callable:
        wrapper = _heavy("downloads", before=join)(f)
        if warm is not None:
            wrapper._assemble_warm = warm
        return wrapper
    return decorate(fn) if fn is not None else decorate


def warmup(obj: object) -> Callable[[], object] | None:
    return getattr(obj, "_assemble_warm", None)


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
