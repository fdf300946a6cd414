"""One error type for everything a user can fix: rendered as one line, never a traceback."""

from __future__ import annotations

import errno
import re
from typing import Any

USAGE = 2   # bad input: recipe, arguments, source tree, patch
FAILED = 1  # a build or a check failed


class AssembleError(Exception):
    """What went wrong, where, and how to fix it; `code` is the exit status."""

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None,
                 code: int = USAGE, details: str | None = None):
        super().__init__(what)
        self.what = what
        self.where = where
        self.fix = fix
        self.code = code
        self.details = details  # extra lines (log tail) printed after the one-line summary

    def line(self) -> str:
        parts = [f"{self.where}: {self.what}" if self.where else self.what]
        if self.fix:
            parts.append(f"fix: {self.fix}")
        # names read from files may hold a newline or an escape: keep them visible, on one line
        return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], " -- ".join(parts))


class BuildFailed(AssembleError):
    def __init__(self, what: str, **kw: Any) -> None:
        kw.setdefault("code", FAILED)
        super().__init__(what, **kw)


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def is_full_disk(exc: BaseException) -> bool:
    """A full disk or quota: the disk's fault, never the input's (worded by paths.full_disk)."""
    return isinstance(exc, OSError) and exc.errno in FULL_DISK


INTERRUPTED = 130   # the shell's 128 + SIGINT


def interrupted() -> int:
    """Ctrl-C, said in one line; the exit status. A second Ctrl-C while saying it is ignored, so it
    never becomes a traceback."""
    import signal
    import sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("error: interrupted", file=sys.stderr, flush=True)
    return INTERRUPTED


def from_interrupt(exc: BaseException | None) -> bool:
    """Whether exc is a Ctrl-C, or an error Python made of one (a KeyboardInterrupt during a class
    definition comes out as "RuntimeError: Error calling __set_name__")."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
