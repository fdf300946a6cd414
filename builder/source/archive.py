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

tarfile's "data" filter then checks each member again as it is written (extract_members: on
Python 3.11.0-3.11.3, which lack it, our own filter with the same refusals). Every failure,
a corrupt or truncated archive included, is ArchiveRefused with a one-line reason.

extract_trees (below) applies the same checks to whole archives with nothing stripped, for
the prebuilt inputs of `assemble repair`, with size limits and absolute symlinks read from
the tree's root.
"""

from __future__ import annotations

import copy
import io
import os
import re
import shutil
import tarfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from builder.errors import is_full_disk

if TYPE_CHECKING:
    from typing_extensions import Buffer

MAX_LINK_HOPS = 40  # what Linux allows before ELOOP

# What tarfile and gzip raise on bytes they cannot read or write: a damaged archive,
# a header field that is out of range: "this archive is unusable". A full disk is not (is_full_disk).
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError, KeyError, ValueError, OverflowError)


class ArchiveRefused(Exception):
    """The archive is unreadable, or extracting it could write outside the destination."""

    def __init__(self, reason: str, archive: int | None = None):
        # member names may hold a newline: the reason stays one line
        super().__init__(re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], reason))
        self.archive = archive          # extract_trees: the index of the archive at fault, when one is


def extract(archive: Path, dest: Path, wanted: Sequence[str]) -> int:
    """Extract the members under the `wanted` folders (paths without the archive's top
    folder) into dest, which must not exist yet; returns how many members were written.

    Raises ArchiveRefused and nothing else, but a full disk (OSError ENOSPC/EDQUOT).
    """
    prefixes = [tuple(p for p in w.split("/") if p) for w in wanted]
    made = False
    try:
        with tarfile.open(archive, "r:gz", errorlevel=2) as tar:
            chosen = _plan(tar.getmembers(), prefixes)
            dest.mkdir()
            made = True
            extract_members(tar, dest, chosen)
    except (*_READ_ERRORS, ArchiveRefused) as exc:
        if made:  # half a tree is never handed on
            shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, ArchiveRefused) or is_full_disk(exc):   # the disk's fault: raised as it is
            raise
        raise ArchiveRefused(_reason(exc)) from None
    return len(chosen)


# --- extraction itself: tarfile's data filter, or ours where the interpreter lacks it -------------
#
# tarfile's extraction filters (PEP 706: `filter=`, TarInfo.replace, tarfile.data_filter) arrived in
# Python 3.11.4; Debian 12's own python3 is 3.11.2. There the same rules are ours (_own_data_filter),
# checked on each member just before it is written, as tarfile does: what is already on disk decides
# where a name or a link really leads.

STDLIB_FILTER = hasattr(tarfile, "data_filter")   # False on 3.11.0-3.11.3; tests set it to force ours


def extract_members(tar: tarfile.TarFile, dest: Path, members: Iterable[tarfile.TarInfo] | None = None) -> None:
    """Extract `members` (default: all) of an open archive into dest under the "data" filter's rules:
    nothing absolute, nothing outside dest (names, symlinks and hard links, followed on disk), no
    device or fifo, no setuid/setgid/sticky or group/other write bits, no ownership from the archive."""
    if STDLIB_FILTER:
        tar.extractall(dest, members=members, filter="data")
        return
    folders = []
    # forced on a newer interpreter (tests), extract() must not filter again, nor warn that it does not
    trusted: dict[str, Any] = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    for member in (tar if members is None else members):
        safe = _own_data_filter(member, str(dest))
        if safe.isdir():
            folders.append(safe)
        tar.extract(safe, dest, set_attrs=not safe.isdir(), numeric_owner=True, **trusted)
    for folder in sorted(folders, key=lambda m: m.name, reverse=True):  # innermost first, as extractall
        where = os.path.join(dest, folder.name)
        tar.utime(folder, where)
        tar.chmod(folder, where)


def _own_data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """The member as it may be written into dest, or ArchiveRefused: our own rules equal to tarfile's
    "data" filter, for interpreters without it."""
    name = member.name
    if name.startswith("/") or os.path.isabs(name):
        raise ArchiveRefused(f"refused by the data filter: member {name!r} is an absolute path")
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([os.path.realpath(path), root]) == root

    if not inside(os.path.join(root, name)):
        raise ArchiveRefused(f"refused by the data filter: member {name!r} would be extracted outside the destination")
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise ArchiveRefused(f"refused by the data filter: member {name!r} is a special file (device or fifo)")
    if member.issym() or member.islnk():
        if os.path.isabs(member.linkname):
            raise ArchiveRefused(f"refused by the data filter: link {name!r} -> {member.linkname!r} is absolute")
        base = os.path.dirname(name) if member.issym() else ""  # a hard link's target is named from the root
        if not inside(os.path.join(root, base, member.linkname)):
            raise ArchiveRefused(f"refused by the data filter: link {name!r} -> {member.linkname!r} "
                                 "points outside the destination")
    mode = member.mode & 0o755                     # no setuid/setgid/sticky, no group/other write
    if member.isdir():
        mode |= 0o700                              # we must be able to write into our own folders
    elif member.isreg() or member.islnk():
        mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    # ownership is ours, never the archive's (as root, extract() chowns to these)
    return _replace(member, {"mode": mode, "uid": os.geteuid(), "gid": os.getegid(), "uname": "", "gname": ""})


def _replace(member: tarfile.TarInfo, changes: dict[str, Any]) -> tarfile.TarInfo:
    """A shallow copy of member with `changes` applied: TarInfo.replace(deep=False) where it exists."""
    if STDLIB_FILTER:
        return member.replace(**changes, deep=False)
    out = copy.copy(member)
    for key, value in changes.items():
        setattr(out, key, value)
    return out


def _reason(exc: BaseException) -> str:
    if isinstance(exc, getattr(tarfile, "FilterError", ())):
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
        chosen.append((rel, kind, _replace(m, changes)))
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
    for rel, _kind, m in chosen:
        for i in range(1, len(rel)):
            through = kinds.get(rel[:i], "folder")
            if through != "folder":
                raise ArchiveRefused(f"member {m.name!r} would be written through the {through} {'/'.join(rel[:i])!r}")
    links = {rel: m.linkname for rel, kind, m in chosen if kind == "symlink"}
    for rel, link in links.items():
        if not link:
            raise ArchiveRefused(f"symlink {'/'.join(rel)!r} has an empty target")
        if link.startswith("/"):
            raise ArchiveRefused(f"symlink {'/'.join(rel)!r} -> {link!r} is absolute")
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


# --- whole trees: the prebuilt inputs of `assemble repair` ---------------------------------
#
# A release archive or a set of Debian packages is extracted whole, nothing stripped: the
# same checks as above run on the whole list of members (of one archive, or of several
# unpacked into one root, as `dpkg -x` of each would), with these differences:
#
# - sizes are limited (Limits), from the headers, before the data is read: a header that takes
#   the total past the limit, or past `ratio` times the packed size, is refused when it is read;
# - devices and fifos are refused, not skipped: a runtime never holds one;
# - an absolute symlink is read as an installed system reads it, from the root of the tree:
#   usr/lib/x/libggml.so -> /usr/lib/x/libggml.so.0 becomes -> libggml.so.0 when its target
#   (followed through the tree's own links) is in the tree; one whose target is not (Debian's
#   /etc/alternatives/..., a build machine's /home/...) is left out, and a note says so. Either
#   way nothing written ever points outside the tree. A relative link that climbs out of the
#   tree is still refused: it is broken or hostile.

@dataclass(frozen=True)
class Limits:
    """How much an archive may unpack to; checked on the headers, before the data is read."""
    total: int = 16 << 30          # bytes of file content, all members together (a ROCm build is a few GB)
    members: int = 200_000         # entries of any kind (rocBLAS alone ships thousands of files)
    ratio: int = 100               # unpacked bytes per packed byte: real binaries pack 2 to 15 times ...
    floor: int = 64 << 20          # ... counted only past this much (a small text file may pack 1000 times)

    def check(self, unpacked: int, packed: int, what: str) -> None:
        if unpacked > self.total:
            raise ArchiveRefused(f"{what} takes the unpacked size past the limit of {_size(self.total)}")
        if unpacked > self.floor and unpacked > self.ratio * max(packed, 1):
            raise ArchiveRefused(f"{what} takes the unpacked size to {_size(unpacked)}, more than {self.ratio} "
                                 f"times the {_size(packed)} it is packed in (a compression bomb)")


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def plan_tree(groups: Sequence[Sequence[tarfile.TarInfo]], notes: list[str]
              ) -> list[list[tuple[int, tarfile.TarInfo]]]:
    """The members to write of several archives unpacked into one tree: for each group, (index of
    the member in the group, the member renamed to its normalised path), in archive order.
    Refuses whatever could escape the tree or write through a link; rewrites or leaves out
    absolute symlinks (above), adding a line to `notes` for each one left out."""
    entries: list[tuple[int, int, tuple[str, ...], str, tarfile.TarInfo]] = []
    absolute: dict[tuple[str, ...], str] = {}
    for g, members in enumerate(groups):
        for i, m in enumerate(members):
            parts = _parts(m.name, "member")
            if not parts:
                if m.isdir():
                    continue
                raise ArchiveRefused(f"member {m.name!r} has an empty name")
            if m.isdev() or m.isfifo():
                raise ArchiveRefused(f"member {m.name!r} is a {'fifo' if m.isfifo() else 'device'}; "
                                     "an archive of programs holds none")
            kind = _kind(m)
            changes = {"name": "/".join(parts)}
            if kind == "hard link":
                changes["linkname"] = "/".join(_parts(m.linkname, f"hard link {m.name!r} ->"))
            elif kind == "symlink" and m.linkname.startswith("/"):
                absolute[parts] = m.linkname
                changes["linkname"] = _from_root(parts, m.linkname)
            entries.append((g, i, parts, kind, _replace(m, changes)))
    _check([(rel, kind, m) for _, _, rel, kind, m in entries])
    if absolute:
        present = {rel[:n] for _, _, rel, kind, _ in entries for n in range(len(rel) + 1)}
        links = {rel: m.linkname for _, _, rel, kind, m in entries if kind == "symlink"}
        dropped = set()
        for rel, target in absolute.items():
            if _resolve(rel, links, [0]) not in present:
                dropped.add(rel)
                notes.append(f"symlink {'/'.join(rel)!r} -> {target!r} left out: its target is not in the unpacked tree")
        if dropped:
            entries = [e for e in entries if e[2] not in dropped or e[3] != "symlink"]
            # without the dropped links, a link that went through one is read as the disk will read it
            _check([(rel, kind, m) for _, _, rel, kind, m in entries])
    out: list[list[tuple[int, tarfile.TarInfo]]] = [[] for _ in groups]
    for g, i, _, _, m in entries:
        out[g].append((i, m))
    return out


def _from_root(link: tuple[str, ...], target: str) -> str:
    """The relative link equivalent to the absolute `target` read from the tree's root. The link's
    folders are real folders (a member under a link is refused), so a common start can be dropped;
    a target with `..` in it keeps its full path (the kernel reads `..` after following links)."""
    parts = [p for p in target.split("/") if p not in ("", ".")]
    here = list(link[:-1])
    common = 0
    if ".." not in parts:
        while common < min(len(here), len(parts)) and here[common] == parts[common]:
            common += 1
    return "/".join([".."] * (len(here) - common) + parts[common:]) or "."


@dataclass(frozen=True)
class TarStream:
    """One tar archive for extract_trees, read once from its start to its end (a pipe will do)."""
    name: str                                        # what refusals call it
    open: Callable[[], AbstractContextManager[BinaryIO]]     # the uncompressed tar as a stream
    packed: int                                      # its packed size, for the ratio limit


def extract_trees(tars: Sequence[TarStream], dest: Path, limits: Limits = Limits(), *, spool: Path,
                  owners: dict[str, int] | None = None) -> list[str]:
    """Extract whole tar archives, one after the other, into dest (an existing, empty folder).
    Each archive is read once, as dpkg-deb reads a data.tar: every header is checked against the
    limits before its data is read, and each file's data goes to spool (a folder of ours on dest's
    filesystem, under names of ours). Only when every archive is read and the whole plan checked is
    anything written into dest: each file by a hard link from the spool (no data is copied twice),
    then links and folder modes, each member passing the data filter first. `owners` (when given)
    gets each written path -> the index of the archive that held it. Returns the notes (links left out).

    Raises ArchiveRefused and nothing else, but a full disk (OSError ENOSPC/EDQUOT: the disk's fault,
    not the archive's); the caller removes dest and spool on a refusal.
    """
    notes: list[str] = []
    try:
        groups = []
        for g, t in enumerate(tars):
            try:
                groups.append(_read_stream(t, g, limits, spool))
            except ArchiveRefused as exc:
                exc.archive = g
                raise
            except _READ_ERRORS as exc:
                if is_full_disk(exc):
                    raise
                raise ArchiveRefused(_reason(exc), g) from None
        total = sum(m.size for group in groups for m in group if m.isreg())
        if total > limits.total:
            raise ArchiveRefused(f"together they unpack to {_size(total)}, past the limit of {_size(limits.total)}")
        if sum(len(group) for group in groups) > limits.members:
            raise ArchiveRefused(f"together they hold more than {limits.members} members")
        folders: list[tarfile.TarInfo] = []
        for g, chosen in enumerate(plan_tree(groups, notes)):
            for i, member in chosen:
                folders += _place(member, dest, spool / f"{g}.{i}")
                if owners is not None:
                    owners[member.name] = g
        for folder in sorted(folders, key=lambda m: m.name, reverse=True):  # innermost first, as extractall
            where = os.path.join(dest, folder.name)
            if folder.mode is not None:
                os.chmod(where, folder.mode)
            os.utime(where, (folder.mtime, folder.mtime))
    except _READ_ERRORS as exc:
        if is_full_disk(exc):
            raise                      # the disk's fault, not the archive's
        raise ArchiveRefused(_reason(exc)) from None
    return notes


class _Forward(io.RawIOBase):
    """A stream read once, as tarfile's random-access reader asks for it: tell(), and seek() only
    forwards (what is skipped is read and dropped), so headers are parsed by tarfile while each file's
    data is read here straight into our buffer (tarfile's stream mode copies every byte four times)."""

    def __init__(self, stream: BinaryIO):
        self._f, self.pos = stream, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def readinto(self, b: Buffer) -> int:
        n: int = self._f.readinto(b)  # type: ignore[attr-defined]  # a raw stream: BinaryIO omits readinto
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        data = self._f.read(size)
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self.pos + offset if whence == 1 else -1
        if target < self.pos:
            raise tarfile.ReadError(f"the archive asks to go back in a stream read once (to {offset}, whence {whence})")
        while self.pos < target and self.read(min(target - self.pos, _CHUNK)):
            pass
        return self.pos


_CHUNK = 1 << 20


def _read_stream(source: TarStream, g: int, limits: Limits, spool: Path) -> list[tarfile.TarInfo]:
    """Every header of one archive, each checked against the limits as it is read (the data is read
    only once its header passed); each file's data written to spool/<g>.<index>."""
    members: list[tarfile.TarInfo] = []
    total = 0
    buf = memoryview(bytearray(_CHUNK))
    with source.open() as raw:
        stream = _Forward(raw)
        with tarfile.open(fileobj=stream, mode="r:", errorlevel=2) as tar:
            while (m := tar.next()) is not None:
                members.append(m)
                if len(members) > limits.members:
                    raise ArchiveRefused(f"more than {limits.members} members (member {m.name!r})")
                if not m.isreg():
                    continue
                total += m.size
                limits.check(total, source.packed, f"member {m.name!r}")
                fd = os.open(spool / f"{g}.{len(members) - 1}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600)
                with os.fdopen(fd, "wb") as out:
                    if m.issparse():
                        sparse = tar.extractfile(m)
                        assert sparse is not None, "a sparse member is a regular file"
                        shutil.copyfileobj(sparse, out, _CHUNK)
                        continue
                    stream.seek(m.offset_data)
                    left = m.size
                    while left:
                        n = stream.readinto(buf[:min(left, _CHUNK)])
                        if not n:
                            raise ArchiveRefused(f"member {m.name!r} is truncated")
                        out.write(buf[:n])
                        left -= n
        # what follows the end-of-archive blocks is read too: a decompressor must run to its end
        rest = 0
        while n := stream.readinto(buf):
            rest += n
            limits.check(total + rest, source.packed, "the data after its last member")
    return members


def _place(member: tarfile.TarInfo, dest: Path, blob: Path) -> list[tarfile.TarInfo]:
    """Write one planned member into dest, after the data filter (tarfile's, or ours where the
    interpreter lacks it) passed it; a file is the spooled blob, hard-linked. Returns the member
    when it is a folder (its mode and time are set once everything under it is written)."""
    safe = tarfile.data_filter(member, str(dest)) if STDLIB_FILTER else _own_data_filter(member, str(dest))
    target = os.path.join(dest, safe.name)
    if safe.isdir():
        os.makedirs(target, exist_ok=True)
        return [safe]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if safe.issym():
        os.symlink(safe.linkname, target)
        return []
    if safe.islnk():
        os.link(os.path.join(dest, safe.linkname), target, follow_symlinks=False)
    else:
        os.link(blob, target, follow_symlinks=False)      # never replaces: a name twice was refused
        os.unlink(blob)
    if safe.mode is not None:
        os.chmod(target, safe.mode)
    os.utime(target, (safe.mtime, safe.mtime))
    return []
