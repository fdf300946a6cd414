"""Locks and ownership records: one writer per place, and proof of what that writer made there.

Nothing here is kept in a user's folder: a lock is either a file the caller names (in the cache)
or an flock on the folder's own descriptor, and a ledger lives in the cache. A ledger names each
path a run made by its exact path, device, inode, pid and time, so a later run can prove a
leftover is its own (the path still is that very inode) instead of guessing from a name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import ui


@contextlib.contextmanager
def exclusive(lock_path: Path, waiting: str, busy: BaseException | None = None) -> Iterator[None]:
    """Hold an flock on lock_path; when another process holds it, say `waiting` and wait,
    or raise `busy` (an exception) instead when given. The fd opens before any wait, so
    an unwritable folder fails at once (OSError for the caller to word)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, waiting, busy)
        with contextlib.suppress(OSError):  # who holds it, for a curious user; a full disk must not stop us
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_folder(folder: Path, waiting: str, busy: BaseException | None = None) -> Iterator[None]:
    """Hold an flock on the folder itself (its own descriptor): no lock file is left in it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _flock(fd, waiting, busy)
        yield
    finally:
        os.close(fd)


def _flock(fd: int, waiting: str, busy: BaseException | None) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if busy is not None:
            raise busy from None
        ui.info(waiting)
        fcntl.flock(fd, fcntl.LOCK_EX)


def place_key(place: Path) -> str:
    """A file name for the state of one absolute place (the same place, the same name)."""
    return hashlib.sha256(os.fsencode(str(place))).hexdigest()[:32]


# --- the ledger ------------------------------------------------------------------------

MARK = "user.assemble.made"   # an extended attribute: a random token, also recorded in the ledger


def mark(path: Path) -> str | None:
    """Tag what we just made with a token of its own; None where the filesystem keeps no xattrs. With it,
    a folder someone else made at a recorded path is told apart even when it got the same inode back."""
    token = secrets.token_hex(8)
    try:
        os.setxattr(path, MARK, token.encode(), follow_symlinks=False)
    except OSError:
        return None
    return token


def unmark(path: Path) -> None:
    """Drop the mark from what is now the user's (a runtime in place, an archive)."""
    with contextlib.suppress(OSError):
        os.removexattr(path, MARK, follow_symlinks=False)


def _marked(path: Path, token: str) -> bool:
    try:
        return os.getxattr(path, MARK, follow_symlinks=False) == token.encode()
    except OSError:
        return False


def identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the path itself (a symlink is not followed); None when nothing is there."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


@dataclass(frozen=True)
class Entry:
    """One path a run made. dev/ino are None while it is only intended (recorded before it is made)."""
    kind: str                   # what the owner calls it: staging, aside, deleting, part, ...
    path: str
    dev: int | None = None
    ino: int | None = None
    pid: int = 0
    time: float = 0.0
    was: str | None = None      # the path it had before a rename the owner records first (deleting)
    mark: str | None = None     # the token of mark(), where the filesystem keeps it
    sha256: str | None = None   # the bytes it was made with, where the owner must prove them later (package)

    def holds(self, path: str | Path | None = None) -> bool:
        """The path (its own, or the one given) still is the very inode recorded, and still carries
        the recorded mark (an inode number alone may be given again to a new file)."""
        p = Path(path or self.path)
        return (self.ino is not None and identity(p) == (self.dev, self.ino)
                and (self.mark is None or _marked(p, self.mark)))


def made(kind: str, path: Path, *, mark: str | None = None, sha256: str | None = None) -> Entry:
    """The entry of a path just made (or about to be: then it records no inode)."""
    dev, ino = identity(path) or (None, None)
    return Entry(kind, str(path), dev, ino, pid=os.getpid(), time=time.time(),
                 mark=mark, sha256=sha256)


@dataclass(frozen=True)
class Ledger:
    place: str
    entries: tuple[Entry, ...] = ()
    swap: dict[str, Any] | None = None    # a swap in progress (outdir's journal); None otherwise

    def without(self, *paths: str | Path) -> Ledger:
        gone = {str(p) for p in paths}
        return dataclasses.replace(self, entries=tuple(e for e in self.entries if e.path not in gone))

    def plus(self, *entries: Entry) -> Ledger:
        """Add (or replace, by path) entries."""
        kept = self.without(*(e.path for e in entries))
        return dataclasses.replace(kept, entries=kept.entries + tuple(entries))


class LedgerUnreadable(Exception):
    """The ledger file is not one we wrote: nothing it names may be acted on."""


def load(path: Path, place: Path) -> Ledger:
    """The ledger at `path` for `place`; empty when there is none."""
    try:
        raw = json.loads(path.read_bytes())
        if raw.get("place") != str(place):
            raise ValueError("for another place")
        entries = tuple(Entry(**e) for e in raw.get("entries", []))
        swap = raw.get("swap")
        if swap is not None and not isinstance(swap, dict):
            raise ValueError("swap is not an object")
    except FileNotFoundError:
        return Ledger(str(place))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise LedgerUnreadable(f"{path}: {exc}") from None
    return Ledger(str(place), entries, swap)


def save(path: Path, ledger: Ledger) -> None:
    """Atomically: a kill leaves the old ledger or the new one."""
    body = {"place": ledger.place, "entries": [dataclasses.asdict(e) for e in ledger.entries], "swap": ledger.swap}
    write_atomic(path, json.dumps(body, indent=1) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """Write a temporary file beside path, flush it to disk, rename it over path: a kill leaves the old
    file or the new one, never half of one. The mode of a file being replaced is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
