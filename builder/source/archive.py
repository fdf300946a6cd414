"""Extract chosen members of a source archive (.tar.gz) into a fresh folder, safely.

An sdist is a download from someone else: it may be hostile or just broken. The
archive's top folder is stripped, and every member that would land is checked first,
on the whole list, before anything is written:

- names: relative, no `..`, all under one top folder; a wanted folder is a folder;
- no member twice (two entries for one folder are harmless and allowed);
- nothing is written through a link: no member lies under a path that is a symlink,
  a hard link or a file in the archive;
- a symlink's target, followed through the archive's own symlinks (the way the kernel
  would), stays inside the destination, without loops;
- a hard link names a regular file extracted before it;
- devices and fifos are skipped; other special types are refused.

tarfile's "data" filter then checks each member again as it is written. Every failure,
a corrupt or truncated archive included, is ArchiveRefused with a one-line reason.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

MAX_LINK_HOPS = 40  # what Linux allows before ELOOP

# What tarfile and gzip raise on bytes they cannot read or write: a damaged archive,
# a full disk, a header field that is out of range. All mean "this archive is unusable".
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, KeyError, ValueError, OverflowError)


class ArchiveRefused(Exception):
    """The archive is unreadable, or extracting it could write outside the destination."""

    def __init__(self, reason: str):
        # member names may hold a newline: the reason stays one line
        super().__init__(re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], reason))


def extract(archive: Path, dest: Path, wanted: Sequence[str]) -> int:
    """Extract the members under the `wanted` folders (paths without the archive's top
    folder) into dest, which must not exist yet; returns how many members were written.

    Raises ArchiveRefused and nothing else.
    """
    prefixes = [tuple(p for p in w.split("/") if p) for w in wanted]
    made = False
    try:
        with tarfile.open(archive, "r:gz", errorlevel=2) as tar:
            chosen = _plan(tar.getmembers(), prefixes)
            dest.mkdir()
            made = True
            tar.extractall(dest, members=chosen, filter="data")
    except _READ_ERRORS as exc:
        if made:  # half a tree is never handed on
            shutil.rmtree(dest, ignore_errors=True)
        raise ArchiveRefused(_reason(exc)) from None
    return len(chosen)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, tarfile.FilterError):
        return f"refused by tarfile's data filter ({exc})"
    if isinstance(exc, OSError) and not isinstance(exc, tarfile.TarError) and exc.strerror:
        where = f": {exc.filename!r}" if exc.filename else ""
        return f"cannot read or extract ({exc.strerror}{where})"
    text = str(exc) or "no detail"
    return f"unreadable archive ({type(exc).__name__}: {text})"


def _parts(name: str, what: str) -> tuple[str, ...]:
    """The path components of an archive name; refuses absolute paths and `..`."""
    if name.startswith("/"):
        raise ArchiveRefused(f"{what} {name!r} is an absolute path")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ArchiveRefused(f"{what} {name!r} escapes the extraction folder (..)")
    return parts


def _kind(m: tarfile.TarInfo) -> str:
    for kind, test in (("file", m.isreg), ("folder", m.isdir), ("symlink", m.issym), ("hard link", m.islnk)):
        if test():
            return kind
    raise ArchiveRefused(f"member {m.name!r} has an unsupported type {m.type!r}")


def _plan(members: Iterable[tarfile.TarInfo], prefixes: list[tuple[str, ...]]) -> list[tarfile.TarInfo]:
    """The members to write, renamed without the top folder, in archive order; refuses any
    member that could escape the destination or write through a link."""
    top: str | None = None
    chosen: list[tuple[tuple[str, ...], str, tarfile.TarInfo]] = []
    for m in members:
        parts = _parts(m.name, "member")
        if not parts:  # "./" of `tar -C dir .` is the archive's root: nothing to write
            if m.isdir():
                continue
            raise ArchiveRefused(f"member {m.name!r} has an empty name")
        top = top or parts[0]
        if parts[0] != top:
            raise ArchiveRefused(f"more than one top folder ({top!r} and {parts[0]!r})")
        rel = parts[1:]
        if not rel:
            if not m.isdir():
                raise ArchiveRefused(f"the top folder {top!r} is not a folder")
            continue
        if not any(rel[:len(p)] == p for p in prefixes) or m.isdev() or m.isfifo():
            continue
        kind = _kind(m)
        if rel in prefixes and kind != "folder":
            raise ArchiveRefused(f"{m.name!r} is a {kind}; a folder was expected")
        changes = {"name": "/".join(rel)}
        if kind == "hard link":
            target = _parts(m.linkname, f"hard link {m.name!r} ->")
            if target[:1] != (top,):
                raise ArchiveRefused(f"hard link {m.name!r} -> {m.linkname!r} points outside the top folder")
            changes["linkname"] = "/".join(target[1:])
        chosen.append((rel, kind, m.replace(**changes, deep=False)))
    _check(chosen)
    return [m for _, _, m in chosen]


def _check(chosen: list[tuple[tuple[str, ...], str, tarfile.TarInfo]]) -> None:
    kinds: dict[tuple[str, ...], str] = {}
    for rel, kind, m in chosen:
        seen = kinds.get(rel)
        if seen is not None and not (seen == kind == "folder"):
            raise ArchiveRefused(f"member {m.name!r} appears twice (as a {seen} and a {kind})")
        if kind == "hard link":
            target = tuple(m.linkname.split("/"))
            if kinds.get(target) != "file":
                raise ArchiveRefused(f"hard link {m.name!r} -> {m.linkname!r}: the target is not a file extracted before it")
        kinds[rel] = kind
    for rel, kind, m in chosen:
        for i in range(1, len(rel)):
            through = kinds.get(rel[:i], "folder")
            if through != "folder":
                raise ArchiveRefused(f"member {m.name!r} would be written through the {through} {'/'.join(rel[:i])!r}")
    links = {rel: m.linkname for rel, kind, m in chosen if kind == "symlink"}
    for rel, target in links.items():
        if not target:
            raise ArchiveRefused(f"symlink {'/'.join(rel)!r} has an empty target")
        if target.startswith("/"):
            raise ArchiveRefused(f"symlink {'/'.join(rel)!r} -> {target!r} is absolute")
        _resolve(rel, links, [0])


def _resolve(link: tuple[str, ...], links: dict[tuple[str, ...], str], hops: list[int]) -> tuple[str, ...]:
    """Where the symlink `link` leads, following the archive's other symlinks on the way as the
    kernel would (a lexical normpath misses `a/b -> .` then `x -> a/b/../..`); refuses an escape."""
    hops[0] += 1
    if hops[0] > MAX_LINK_HOPS:
        raise ArchiveRefused(f"symlink {'/'.join(link)!r} is part of a loop (more than {MAX_LINK_HOPS} hops)")
    here = list(link[:-1])
    for part in links[link].split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not here:
                raise ArchiveRefused(f"symlink {'/'.join(link)!r} -> {links[link]!r} points outside the extraction folder")
            here.pop()
            continue
        here.append(part)
        if tuple(here) in links:
            here = list(_resolve(tuple(here), links, hops))
    return tuple(here)
