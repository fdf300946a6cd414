"""Downloads and the sid chroot, warmed in the background while the first llama.cpp build compiles.

A @downloads fixture may name its warm-up (a call with no arguments that fills the shared test
cache: vendorlibs.rocm_libs, the sid chroot...). When the selected tests use such fixtures, the
conftest starts one thread running each of their warm-ups once, right after collection; such a
fixture joins its own warm-up, then finds the cache full (the cache's file locks make a fixture
that comes first wait, never fetch twice). A warm-up that fails is left to its fixture, which tries
again in the test and fails there with its own message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

_thread: threading.Thread | None = None
_done: dict[Callable[[], object], threading.Event] = {}
_log: list[str] = []               # one line per warm-up: name, seconds, or the error


def start(warmups: Iterable[Callable[[], object]]) -> None:
    global _thread  # noqa: PLW0603 -- one prefetch thread per test session
    todo = list(dict.fromkeys(warmups))          # once each, in the order the tests need them
    if _thread is not None or not todo:
        return
    _done.update((warm, threading.Event()) for warm in todo)

    def run() -> None:
        for warm in todo:
            t0 = time.monotonic()
            try:
                warm()
                _log.append(f"{warm.__qualname__}: {time.monotonic() - t0:.0f} s")
            except Exception as exc:     # noqa: BLE001 -- the fixture retries and reports it
                _log.append(f"{warm.__qualname__}: failed ({exc.__class__.__name__}: {str(exc)[:200]})")
            finally:
                _done[warm].set()

    _thread = threading.Thread(target=run, name="assemble-prefetch", daemon=True)
    _thread.start()


def join(warm: Callable[[], object]) -> None:
    """Wait until `warm` has run in the background (at once when it was never scheduled)."""
    event = _done.get(warm)
    if event is not None and threading.current_thread() is not _thread:
        event.wait()


def report() -> list[str]:
    return list(_log)
