"""One exclusive lock file, shared by every run that writes the same place."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from builder import ui


@contextlib.contextmanager
def exclusive(lock_path: Path, waiting: str, busy=None):
    """Hold an flock on lock_path; when another process holds it, say `waiting` and wait,
    or raise `busy` (an exception) instead when given. The fd opens before any wait, so
    an unwritable folder fails at once (OSError for the caller to word)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if busy is not None:
                raise busy from None
            ui.info(waiting)
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(OSError):  # who holds it, for a curious user; a full disk must not stop us
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)
