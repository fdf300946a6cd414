"""Safe output folders: one writer at a time, build beside, swap in by rename.

A runtime is assembled in a temporary sibling (same filesystem, so the final
rename is atomic); an existing runtime is moved aside, never deleted; leftovers
of an interrupted run are recognised by name and cleared on the next run.

The swap is one atomic exchange (renameat2 RENAME_EXCHANGE) where the filesystem
has it, so <out> always names a whole runtime; a journal beside the output says
which folder is which, so a run killed in the middle of a swap is finished (or
undone) by the next one instead of a runtime being mistaken for a leftover.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shutil
import time
from pathlib import Path

from builder import locks, ui
from builder.errors import AssembleError, BuildFailed

STAGING_TAG = ".assembling-"
OLD_TAG = ".previous-"
DELETING_TAG = ".deleting-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _journal(out: Path) -> Path:
    return out.parent / f".{out.name}.swap.json"


@contextlib.contextmanager
def locked(out: Path, wait: bool = True):
    """An exclusive lock for one output folder (a lock file beside it). Disk-full, read-only and
    permission errors met while holding it become one clear line, not a traceback."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (_as_error(exc, out) or exc) from None
    lock_path = out.parent / f".{out.name}.lock"
    busy = None if wait else AssembleError("another assemble run is writing this runtime", where=str(out),
                                           fix="wait for it to finish, or drop --no-wait")
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(locks.exclusive(lock_path, f"waiting for another assemble run writing {out} ...",
                                                busy))
        except OSError as exc:
            raise AssembleError(f"cannot create the lock file ({exc.strerror})", where=str(lock_path),
                                fix="choose an output folder you can write to (--out DIR)") from None
        try:
            yield
        except OSError as exc:
            translated = _as_error(exc, out)
            if translated is None:
                raise
            raise translated from exc


def _as_error(exc: OSError, out: Path) -> AssembleError | None:
    """The user-fixable OSErrors of writing a runtime, as one line; None for anything else (a bug)."""
    where = exc.filename or str(out)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return BuildFailed("no space left on the device while writing the runtime; the previous runtime "
                           "is untouched", where=str(where), fix="free space there, or choose --out on another disk")
    if exc.errno == errno.EROFS:
        return AssembleError("the output folder is on a read-only filesystem", where=str(where),
                             fix="choose an output folder you can write to (--out DIR)")
    if exc.errno in (errno.EACCES, errno.EPERM) and str(where).startswith(str(out.parent)):
        return AssembleError(f"cannot write the output ({exc.strerror})", where=str(where),
                             fix="choose an output folder you can write to (--out DIR)")
    return None


def clear_leftovers(out: Path) -> None:
    """Finish or undo a swap that was interrupted, then drop staging folders and half-deleted old
    runtimes of interrupted runs (only ours: they carry our tags). Call it holding the lock."""
    _recover_swap(out)
    for tag in (STAGING_TAG, DELETING_TAG):
        for p in out.parent.glob(f"{out.name}{tag}*"):
            ui.detail(f"removing the leftover of an interrupted run: {p}")
            shutil.rmtree(p, ignore_errors=True)


def _recover_swap(out: Path) -> None:
    journal = _journal(out)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal.with_name(journal.name + ".tmp"))
    try:
        j = json.loads(journal.read_text())
        staging, aside, new_ino = Path(j["staging"]), Path(j["aside"]), int(j["new_ino"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        # Unreadable (not written by us?): keep every staging folder, never delete a possible runtime.
        for i, p in enumerate(out.parent.glob(f"{out.name}{STAGING_TAG}*")):
            os.rename(p, out.parent / f"{out.name}{OLD_TAG}recovered-{os.getpid()}-{i}")
        journal.unlink()
        return
    if _ino(out) == new_ino:
        # The new runtime is in place; the old one is still under the staging name.
        if _ino(staging) is not None and _ino(aside) is None:
            os.rename(staging, aside)
            ui.info(f"finished an interrupted swap: previous runtime moved aside to {aside}")
    elif _ino(out) is None:
        # Killed between the two renames of the fallback: the new runtime was verified, put it in.
        if _ino(staging) == new_ino:
            os.rename(staging, out)
            ui.info(f"finished an interrupted swap: {out}")
        elif _ino(aside) is not None:
            os.rename(aside, out)
            ui.info(f"undid an interrupted swap: {out} is the previous runtime again")
    journal.unlink()


def _ino(p: Path) -> int | None:
    try:
        return p.lstat().st_ino
    except FileNotFoundError:
        return None


def staging_dir(out: Path) -> Path:
    path = out.parent / f"{out.name}{STAGING_TAG}{os.getpid()}"
    try:
        path.mkdir()
    except OSError as exc:
        raise AssembleError(f"cannot create the output ({exc.strerror})", where=str(out.parent),
                            fix="choose an output folder you can write to (--out DIR)") from None
    return path


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the kernel, libc or filesystem cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_in(staging: Path, out: Path, keep: int | None = None) -> Path | None:
    """Put `staging` at `out`; an existing runtime moves to <out>.previous-<time>. Returns where it went."""
    aside = None
    if out.exists() or out.is_symlink():
        base = f"{out.name}{OLD_TAG}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        aside, n = out.parent / base, 0
        while aside.exists() or aside.is_symlink():   # two swaps in one second by one process (a library caller)
            n += 1
            aside = out.parent / f"{base}-{n}"
        journal = _journal(out)
        tmp = journal.with_name(journal.name + ".tmp")
        tmp.write_text(json.dumps({"staging": str(staging), "aside": str(aside), "new_ino": staging.lstat().st_ino}))
        os.replace(tmp, journal)
        if _exchange(staging, out):
            os.rename(staging, aside)   # the staging name now holds the previous runtime
        else:
            os.rename(out, aside)
            os.rename(staging, out)
        journal.unlink()
        ui.info(f"previous runtime moved aside to {aside}")
    else:
        os.rename(staging, out)
    if keep is not None:
        _prune(out, keep)
    return aside


def _prune(out: Path, keep: int) -> None:
    """Only on request (--keep N): drop moved-aside runtimes beyond the newest N, and only ones this
    tool made (tagged name and a manifest inside); by default nothing is ever deleted. Each is
    renamed before it is deleted, so a half-deleted one is never taken for a runtime."""
    olds = sorted((p for p in out.parent.glob(f"{out.name}{OLD_TAG}*") if (p / "manifest.json").is_file()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for i, p in enumerate(olds[keep:]):
        ui.detail(f"removing an old moved-aside runtime beyond --keep {keep}: {p}")
        doomed = out.parent / f"{out.name}{DELETING_TAG}{os.getpid()}-{i}"
        os.rename(p, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
