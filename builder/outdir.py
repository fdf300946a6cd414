"""Safe output folders: one writer at a time, build beside, swap in by rename.

A runtime is assembled in a temporary sibling (same filesystem, so the final
rename is atomic); an existing runtime is moved aside, never deleted; leftovers
of an interrupted run are recognised by name and cleared on the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path

from builder import ui
from builder.errors import AssembleError

STAGING_TAG = ".assembling-"
OLD_TAG = ".previous-"


@contextlib.contextmanager
def locked(out: Path, wait: bool = True):
    """An exclusive lock for one output folder (a lock file beside it)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.parent / f".{out.name}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise AssembleError(f"cannot create the lock file ({exc.strerror})", where=str(lock_path),
                            fix="choose an output folder you can write to (--out DIR)") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise AssembleError("another assemble run is writing this runtime", where=str(out),
                                    fix="wait for it to finish, or drop --no-wait") from None
            ui.info(f"waiting for another assemble run writing {out} ...")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def clear_leftovers(out: Path) -> None:
    """Staging folders of interrupted runs of this output (only ours: they carry our tag)."""
    for p in out.parent.glob(f"{out.name}{STAGING_TAG}*"):
        ui.detail(f"removing the leftover of an interrupted run: {p}")
        shutil.rmtree(p, ignore_errors=True)


def staging_dir(out: Path) -> Path:
    path = out.parent / f"{out.name}{STAGING_TAG}{os.getpid()}"
    try:
        path.mkdir()
    except OSError as exc:
        raise AssembleError(f"cannot create the output ({exc.strerror})", where=str(out.parent),
                            fix="choose an output folder you can write to (--out DIR)") from None
    return path


def swap_in(staging: Path, out: Path, keep: int | None = None) -> Path | None:
    """Put `staging` at `out`; an existing runtime moves to <out>.previous-<time>. Returns where it went."""
    aside = None
    if out.exists() or out.is_symlink():
        aside = out.parent / f"{out.name}{OLD_TAG}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        os.rename(out, aside)
        ui.info(f"previous runtime moved aside to {aside}")
    os.rename(staging, out)
    if keep is not None:
        _prune(out, keep)
    return aside


def _prune(out: Path, keep: int) -> None:
    """Only on request (--keep N): drop moved-aside runtimes beyond the newest N, and only ones this
    tool made (tagged name and a manifest inside); by default nothing is ever deleted."""
    olds = sorted((p for p in out.parent.glob(f"{out.name}{OLD_TAG}*") if (p / "manifest.json").is_file()),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    for p in olds[keep:]:
        ui.detail(f"removing an old moved-aside runtime beyond --keep {keep}: {p}")
        shutil.rmtree(p, ignore_errors=True)
