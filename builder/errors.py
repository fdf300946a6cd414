"""One error type for everything a user can fix: rendered as one line, never a traceback."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

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
    def __init__(self, what: str, **kw):
        kw.setdefault("code", FAILED)
        super().__init__(what, **kw)


FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


def full_disk(exc: BaseException, where: str | os.PathLike | None = None, *, fix: str | None = None,
              untouched: str = "") -> AssembleError | None:
    """A full disk or quota (ENOSPC, EDQUOT) met anywhere, as one line: where (`where`, else the
    file that failed; the cache when it lies there), how much is free, how to fix it; None for any
    other error. Never worded as a damaged input: the bytes were fine, the disk was not.
    `untouched` says what was kept whole (" while writing ...; the previous runtime is untouched")."""
    if not isinstance(exc, OSError) or exc.errno not in FULL_DISK:
        return None
    from builder import paths       # paths imports this module
    place = Path(os.fsdecode(where or exc.filename or "."))   # the caller's folder over a scratch file in it
    try:
        cache = paths.cache_dir()
    except AssembleError:
        cache = None
    if cache is not None and place.is_relative_to(cache):   # a scratch or state file: name the cache itself
        place, fix = cache, ("free space on that disk, or set ASSEMBLE_CACHE to a folder on a larger one "
                             "(the cache holds sources, builds and unpacked inputs)")
    folder = next((p for p in (place, *place.parents) if p.is_dir()), Path("."))
    try:
        usage = shutil.disk_usage(folder)
        free = f"{_size(usage.free)} free of {_size(usage.total)}"
    except OSError:
        free = "free space unknown"
    what = "quota exceeded" if exc.errno == errno.EDQUOT else "no space left on the device"
    cached = " in the assemble cache" if place == cache else ""
    return BuildFailed(f"{what}{cached} ({free}){untouched}", where=str(place),
                       fix=fix or "free space there, or choose a folder on another disk")


def _size(n: int) -> str:
    return (f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB" if n >= 2**20
            else f"{n / 2**10:.0f} KiB")


INTERRUPTED = 130   # the shell's 128 + SIGINT


def interrupted() -> int:
    """Ctrl-C, said in one line; the exit status. A second Ctrl-C while saying it is ignored, so it
    never becomes a traceback."""
    import signal
    import sys
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("error: interrupted", file=sys.stderr, flush=True)
    return INTERRUPTED


def from_interrupt(exc: BaseException) -> bool:
    """Whether exc is a Ctrl-C, or an error Python made of one (a KeyboardInterrupt during a class
    definition comes out as "RuntimeError: Error calling __set_name__")."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
