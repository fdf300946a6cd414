"""What deploy wrote, and the one ownership rule: a path deploy would write that already exists must be
one it wrote, with the bytes it wrote; anything else is a foreign file, refused (exit 2) before anything
is stopped or written.

The ledger is state/ledger.json inside the tree (builder.locks' Entry and Ledger, saved atomically).
Paths are host paths, and files and release folders are proved by content, not by inode, so a tree
written with --root into an image stays valid once the image is booted:
  file     the unit, the sysusers file: sha256 of the bytes
  release  releases/ID and trash/ENTRY: sha256 of the folder's release.json (a rename keeps it)
  partial  releases/ID.partial-XXXX being copied: device, inode and an xattr mark (it never leaves this
           machine; the mark tells apart a folder that got the same inode back)
Every change is recorded before it is made and settled after (a path may have two entries in between:
the bytes before and after), so a kill at any instant leaves each path provably ours. `current` is ours
when it is a symlink to one of our releases; state/ is deploy's own bookkeeping (the ledger lives there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import time
from pathlib import Path

from builder import locks
from builder.deploy.layout import RECORD, HostTree
from builder.digest import sha256_file
from builder.errors import AssembleError

FILE, RELEASE, PARTIAL = "file", "release", "partial"


def load(tree: HostTree) -> locks.Ledger:
    """The tree's ledger (empty when there is none); a ledger deploy did not write is refused."""
    try:
        return locks.load(tree.ledger, tree.host_path(tree.base))
    except locks.LedgerUnreadable as exc:
        raise AssembleError(f"the deploy ledger is not one deploy wrote ({exc})", where=str(tree.ledger),
                            fix="this folder is not a deploy tree assemble can trust; choose another --name") from None


def save(tree: HostTree, ledger: locks.Ledger) -> None:
    tree.state.mkdir(parents=True, exist_ok=True)
    locks.save(tree.ledger, ledger)


def key(tree: HostTree, path: Path) -> str:
    return str(tree.host_path(path))


def _digest(path: Path, kind: str) -> str | None:
    try:
        if kind == RELEASE:
            if path.is_symlink() or not path.is_dir():
                return None
            path = path / RECORD
        return sha256_file(path) if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def owns(tree: HostTree, ledger: locks.Ledger, path: Path) -> bool:
    """`path` is exactly what deploy last wrote there."""
    mine = [e for e in ledger.entries if e.path == key(tree, path)]
    if any(e.kind == PARTIAL and e.holds(path) for e in mine):
        return True
    digests = {e.sha256 for e in mine if e.kind != PARTIAL and e.sha256}
    return bool(digests) and _digest(path, mine[0].kind) in digests


def holds(path: Path, text: str) -> bool:
    """The file at `path` holds exactly `text` (what write_file would write there is already there)."""
    return _digest(path, FILE) == hashlib.sha256(text.encode()).hexdigest()


def owns_current(tree: HostTree, ledger: locks.Ledger) -> bool:
    release_id = tree.current_id()
    return tree.current.is_symlink() and release_id is not None and owns(tree, ledger, tree.release(release_id))


def _add(ledger: locks.Ledger, entry: locks.Entry) -> locks.Ledger:
    """Add an entry beside those of the same path (a change in flight has both)."""
    if entry in ledger.entries:
        return ledger
    return dataclasses.replace(ledger, entries=ledger.entries + (entry,))


def _settle(ledger: locks.Ledger, path_key: str, digest: str | None) -> locks.Ledger:
    """Keep only the entry for what is at the path now."""
    keep = tuple(e for e in ledger.entries if e.path != path_key or (digest is not None and e.sha256 == digest))
    return dataclasses.replace(ledger, entries=keep)


def _entry(tree: HostTree, kind: str, path: Path, digest: str | None) -> locks.Entry:
    return locks.Entry(kind, key(tree, path), pid=os.getpid(), time=time.time(), sha256=digest)


def recorded(tree: HostTree, ledger: locks.Ledger, kind: str) -> list[tuple[Path, locks.Entry]]:
    """(path on this machine, entry) of every recorded path of this kind, oldest first."""
    found = [(tree.root / e.path.lstrip("/"), e) for e in ledger.entries if e.kind == kind]
    return sorted(found, key=lambda pe: pe[1].time)


def refuse_foreign(tree: HostTree, ledger: locks.Ledger, paths: list[Path]) -> None:
    """Refuse (exit 2, naming it) the first of `paths` that exists and is not what deploy wrote there."""
    for path in paths:
        if path == tree.current:
            if os.path.lexists(path) and not owns_current(tree, ledger):
                raise foreign(path)
        elif os.path.lexists(path) and not owns(tree, ledger, path):
            raise foreign(path)


def foreign(path: Path) -> AssembleError:
    return AssembleError("a file deploy did not write is in the way; it is never replaced", where=str(path),
                         fix="move it away (or deploy under another --name)")


def refuse_foreign_base(tree: HostTree) -> None:
    """The tree's folder exists without a ledger: it is someone else's unless it is empty (or holds only
    what an interrupted first run left: the lock, the empty state folder)."""
    if tree.ledger.exists() or not os.path.lexists(tree.base):
        return
    if tree.base.is_symlink() or not tree.base.is_dir():
        raise AssembleError("the deploy folder is not a folder deploy made", where=str(tree.base),
                            fix="move it away, or deploy under another --name")
    others = sorted(set(os.listdir(tree.base)) - {tree.lock.name}
                    - ({tree.state.name} if tree.state.is_dir() and not any(tree.state.iterdir()) else set()))
    if others:
        raise AssembleError(f"the deploy folder holds files deploy did not write ({others[0]}) and no ledger",
                            where=str(tree.base), fix="move them away, or deploy under another --name")


def write_file(tree: HostTree, ledger: locks.Ledger, path: Path, text: str, mode: int = 0o644) -> locks.Ledger:
    """Write `text` at `path` (tmp + fsync + rename, recorded before and settled after) unless it already
    holds exactly that. A file deploy did not write there is refused."""
    refuse_foreign(tree, ledger, [path])
    digest = hashlib.sha256(text.encode()).hexdigest()
    if _digest(path, FILE) == digest:
        return ledger
    ledger = _add(ledger, _entry(tree, FILE, path, digest))
    save(tree, ledger)
    locks.write_atomic(path, text)
    os.chmod(path, mode)
    fsync_dir(path.parent)
    ledger = _settle(ledger, key(tree, path), digest)
    save(tree, ledger)
    return ledger


def intend_partial(tree: HostTree, ledger: locks.Ledger, partial: Path) -> locks.Ledger:
    """Record a copy folder's name before it is made (no inode yet): a kill between its mkdir and
    start_partial leaves an empty folder of that name, which tidy removes, and only while it is empty."""
    ledger = _add(ledger, dataclasses.replace(locks.made(PARTIAL, partial), path=key(tree, partial)))
    save(tree, ledger)
    return ledger


def start_partial(tree: HostTree, ledger: locks.Ledger, partial: Path) -> locks.Ledger:
    """Record a just-made copy folder by its inode (replacing the name intend_partial recorded), before
    anything is copied into it."""
    made = locks.made(PARTIAL, partial, mark=locks.mark(partial))   # the mark tells a reused inode apart
    ledger = ledger.plus(dataclasses.replace(made, path=key(tree, partial)))
    save(tree, ledger)
    return ledger


def move(tree: HostTree, ledger: locks.Ledger, src: Path, dst: Path) -> locks.Ledger:
    """Rename a release folder (a finished copy into releases/, a release into trash/ and back): the
    destination is recorded first, the source dropped after; never onto something already there."""
    digest = _digest(src, RELEASE)
    ledger = _add(ledger, _entry(tree, RELEASE, dst, digest))
    save(tree, ledger)
    dst.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dst):
        raise AssembleError("a folder is already at the destination of a move; nothing is replaced", where=str(dst),
                            fix="move it away")
    os.rename(src, dst)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)
    ledger = dataclasses.replace(ledger, entries=tuple(e for e in ledger.entries if e.path != key(tree, src)))
    save(tree, ledger)
    return ledger


def tidy(tree: HostTree, ledger: locks.Ledger) -> locks.Ledger:
    """Remove the copies an interrupted run left (each only while it still is the very folder it made) and
    settle what a kill left in flight: keep each entry only while its path still holds what it records."""
    for path, entry in recorded(tree, ledger, PARTIAL):
        if entry.holds(path):
            shutil.rmtree(path)
        elif entry.ino is None and path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):     # a name recorded before its mkdir: removed only while empty
                path.rmdir()
    kept = tuple(e for e in ledger.entries if e.kind != PARTIAL and _still_recorded(tree, ledger, e))
    if kept != ledger.entries:
        ledger = dataclasses.replace(ledger, entries=kept)
        save(tree, ledger)
    return ledger


def _still_recorded(tree: HostTree, ledger: locks.Ledger, entry: locks.Entry) -> bool:
    """Whether tidy keeps an entry: while its path holds what it records; or while the path holds something
    no entry of it records (someone edited deploy's file: refused as foreign, but remembered, so a revert of
    the edit makes it deploy's again and no refusal ever forgets it). Dropped: the entries of a path that is
    gone, and the other half of a change a kill left in flight (the path holds what its other entry records)."""
    path = tree.root / entry.path.lstrip("/")
    now = _digest(path, entry.kind)
    if now == entry.sha256:
        return True
    if now is None:
        return False
    return not any(e.path == entry.path and e.kind == entry.kind and e.sha256 == now for e in ledger.entries)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def forget(tree: HostTree, ledger: locks.Ledger, path: Path) -> locks.Ledger:
    return dataclasses.replace(ledger, entries=tuple(e for e in ledger.entries if e.path != key(tree, path)))


def delete(tree: HostTree, ledger: locks.Ledger, path: Path) -> locks.Ledger:
    """Delete a release folder of ours: renamed to a hidden name recorded by inode (a PARTIAL, which tidy
    finishes after a kill), then removed."""
    doomed = path.parent / f".retiring-{path.name}"
    ledger = _add(ledger, dataclasses.replace(locks.made(PARTIAL, path, mark=locks.mark(path)), path=key(tree, doomed)))
    save(tree, ledger)
    os.rename(path, doomed)
    ledger = forget(tree, ledger, path)
    save(tree, ledger)
    shutil.rmtree(doomed)
    ledger = forget(tree, ledger, doomed)
    save(tree, ledger)
    return ledger
