"""What compiles llama.cpp or downloads says so: @compiles, @downloads, @downloads(warm=f).

The marks are read by the test suite's tiers (tests/support/tiers.py), which installs the two hooks
below when it is imported: `guard` refuses a quick-tier test that reaches a heavy helper, `join` waits
for the background prefetch of `warm`. Scripts that use these helpers never install them, so a bench
script runs them as plain functions and scripts never import tests.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

_ATTR = "_assemble_heavy"          # the heavy thing's one-line description
_WARM = "_assemble_warm"           # what fills the cache a @downloads helper reads


def _no_guard(what: str) -> None:
    """Outside the test suite nothing is refused."""


def _no_join(warm: Callable[[], object]) -> None:
    """Outside the test suite nothing runs in the background."""


guard: Callable[[str], None] = _no_guard
join: Callable[[Callable[[], object]], None] = _no_join


def _heavy(reason: str, warm: Callable[[], object] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        label = f"{reason} ({fn.__qualname__})"

        def before() -> None:
            guard(label)
            if warm is not None:
                join(warm)
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                before()
                yield from fn(*args, **kwargs)
        else:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                before()
                return fn(*args, **kwargs)
        setattr(wrapper, _ATTR, label)
        if warm is not None:
            setattr(wrapper, _WARM, warm)
        return wrapper
    return decorate


compiles = _heavy("compiles llama.cpp")


def downloads(fn: Callable[..., Any] | None = None, *,
              warm: Callable[[], object] | None = None) -> Callable[..., Any]:
    """@downloads, or @downloads(warm=f): f (no arguments) fills the cache this helper reads, and the
    suite's background prefetch runs it while the first build compiles."""
    decorate = _heavy("downloads", warm)
    return decorate(fn) if fn is not None else decorate


def heavy_reason(obj: object) -> str | None:
    """What makes a fixture function or helper heavy, None when it is not."""
    return getattr(obj, _ATTR, None)


def warmup(obj: object) -> Callable[[], object] | None:
    return getattr(obj, _WARM, None)
