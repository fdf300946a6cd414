"""The inputs of `assemble repair`: what each argument is, and its content unpacked safely.

An input is a CMake build folder (read in place, never copied), a release archive (.tar.gz,
.tgz, .tar.xz, .tar.zst, .zip: upstream's llama-b7416-bin-ubuntu-x64.tar.gz) or Debian packages
(every .deb argument together is one input, unpacked into one root as `dpkg -x` of each would).

Archives come from the internet, so extraction refuses, with one line naming the member:
absolute names and `..`; a member written through a link; a relative symlink leaving the tree
(followed through the tree's own links); a hard link to anything but a file extracted before
it; devices, fifos and other special files; a name twice; more than Limits.total bytes
unpacked or Limits.members entries; more than Limits.ratio times the packed size (a
compression bomb). Zip adds: names with a backslash or a NUL, encrypted members, members
whose data overlap (the overlapping-file zip bomb). Tar, and the data.tar of each .deb, go
through builder.source.archive.extract_trees; zip is checked by the same planning code
(each entry read as a tar header) and written here, keeping the unix permission bits of
external_attr as tarfile's data filter keeps tar's (executables stay executable; setuid,
setgid, sticky and group/other write are dropped).

Absolute symlinks (Debian's usr/lib/<triplet>/libggml.so -> /usr/lib/<triplet>/libggml.so.0)
are read from the root of the unpacked tree: rewritten to the equivalent relative link when
the target is in the tree, left out with a note otherwise (/etc/alternatives/...). Nothing
written ever points outside dest.

Everything is extracted into a temporary folder beside dest and renamed onto it at the end:
a refused or interrupted unpack leaves no dest and no temporary folder behind.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder import paths, ui
from builder.config.upstream import build_in_name
from builder.digest import sha256_file
from builder.errors import AssembleError, is_full_disk
from builder.runtime.owners import DEB_DOC, Owner
from builder.prebuilt import streams
from builder.source.archive import ArchiveRefused, Limits, TarStream, extract_trees, plan_tree

# suffix -> its compression (builder.prebuilt.streams; "zip" for zip); matched on the lower-cased name
ARCHIVES = {".tar.gz": "gz", ".tgz": "gz", ".tar.xz": "xz", ".tar.zst": "zst", ".zip": "zip"}
# data.tar.<ext> inside a .deb (dpkg-deb writes xz, zstd or gzip; old packages bzip2 or none)
DEB_DATA = {"data.tar.xz": "xz", "data.tar.zst": "zst", "data.tar.gz": "gz", "data.tar.bz2": "bz2", "data.tar": ""}
LIMITS = Limits()
MAX_LINK_TARGET = 4096            # a zip symlink's content is its target: PATH_MAX at most
_ACCEPTED = "a build folder, a release archive (.tar.gz, .tgz, .tar.xz, .tar.zst, .zip) or .deb files"
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
               NotImplementedError, RuntimeError, OverflowError, KeyError, UnicodeError)


@dataclass(frozen=True)
class Input:
    given: str                 # as the user typed it (debs: the .deb arguments joined by spaces)
    path: Path                 # resolved (debs: the first .deb)
    kind: str                  # "folder" | "archive" | "debs"
    files: tuple[Path, ...]    # the archive, or the .deb files (in the order given); () for a folder
    sha256: str | None         # archive: its sha256; debs: sha256 of the sorted "name sha256\n" lines; folder: None
    build: str | None          # an upstream build tag read from the name when present ("b7416")
    givens: tuple[str, ...] = ()  # each of files as the user typed it (a symlink by its own name)


def _archive_suffix(name: str) -> str | None:
    low = name.lower()
    return next((s for s in ARCHIVES if low.endswith(s)), None)


def _sha(path: Path, given: str) -> str:
    try:
        return sha256_file(path)
    except OSError as exc:
        raise AssembleError(f"cannot read it ({exc.strerror or exc})", where=given,
                            fix="check its permissions, or download it again") from None


def classify(args: Sequence[str]) -> tuple[Input, ...]:
    """What each argument is, in the order given; the .deb files form one input, placed where the
    first .deb was. Refuses a missing path, a special file, an unknown file type, an empty list."""
    if not args:
        raise AssembleError("no input given", where="assemble repair", fix=f"name {_ACCEPTED}")
    slots: list[Input | None] = []
    debs: list[tuple[str, Path]] = []
    deb_slot: int | None = None
    seen: dict[Path, str] = {}
    for given in args:
        p = Path(given).expanduser()
        try:
            st = p.stat()
        except OSError as exc:
            what = ("a symlink to nothing" if p.is_symlink() else "no such file or folder") \
                if isinstance(exc, FileNotFoundError) else f"cannot read it ({exc.strerror or exc})"
            raise AssembleError(what, where=given, fix=f"check the path; an input is {_ACCEPTED}") from None
        path = p.resolve()
        if path in seen:
            raise AssembleError(f"given twice (also as {seen[path]!r})", where=given, fix="name each input once")
        seen[path] = given
        if stat.S_ISDIR(st.st_mode):
            slots.append(Input(given, path, "folder", (), None, build_in_name(p.name) or build_in_name(path.name)))
        elif not stat.S_ISREG(st.st_mode):
            raise AssembleError("is a special file (a device, fifo or socket), not a folder or an archive",
                                where=given, fix=f"give {_ACCEPTED}")
        elif path.name.lower().endswith(".deb") or p.name.lower().endswith(".deb"):
            if deb_slot is None:
                deb_slot = len(slots)
                slots.append(None)
            debs.append((given, path))
        elif _archive_suffix(p.name) or _archive_suffix(path.name):
            slots.append(Input(given, path, "archive", (path,), _sha(path, given),
                               build_in_name(p.name) or build_in_name(path.name), (given,)))
        else:
            raise AssembleError("unknown file type: not a release archive or a Debian package", where=given,
                                fix=f"give {_ACCEPTED}; a renamed archive keeps its real suffix")
    if deb_slot is not None:
        slots[deb_slot] = _debs(debs)
    return tuple(s for s in slots if s is not None)


def _debs(debs: list[tuple[str, Path]]) -> Input:
    names: dict[str, str] = {}
    lines = []
    for given, path in debs:
        if path.name in names:
            raise AssembleError(f"two .deb files named {path.name} ({names[path.name]!r} and {given!r})",
                                where=given, fix="give each package once")
        names[path.name] = given
        lines.append(f"{path.name} {_sha(path, given)}\n")
    digest = hashlib.sha256("".join(sorted(lines)).encode()).hexdigest()
    tags = {t for _, path in debs if (t := build_in_name(path.name))}
    return Input(" ".join(g for g, _ in debs), debs[0][1], "debs", tuple(p for _, p in debs), digest,
                 tags.pop() if len(tags) == 1 else None, tuple(g for g, _ in debs))


# --- unpacking ------------------------------------------------------------------------------

def unpack(inp: Input, dest: Path, *, limits: Limits = LIMITS, notes: list[str] | None = None,
           members: dict[str, str] | None = None) -> Path:
    """Where the input's content is: a folder is read in place (dest untouched); an archive or the
    packages are extracted into dest (created; if it exists it must be an empty folder), and the
    root holding the content returned: an archive's one top-level folder when it has exactly one,
    else dest; the packages' root (dest, which holds usr/). Notes (symlinks left out) go to
    `notes` when given, else are printed. `members` (when given) gets each extracted path,
    relative to dest, -> the name of the file that held it (the archive's, or that .deb's)."""
    if inp.kind == "folder":
        return inp.path
    dest = Path(dest)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise AssembleError("the folder to unpack into exists and is not empty", where=str(dest),
                            fix="unpack into a new folder")
    said: list[str] = []
    current = inp.given
    work: Path | None = None
    held: dict[str, int] = {}
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.unpack-", dir=dest.parent))
        tree, spool = work / "tree", work / "spool"
        tree.mkdir()
        spool.mkdir()
        if inp.kind == "archive":
            suffix = _archive_suffix(inp.path.name) or _archive_suffix(Path(inp.given).name) or ""
            how = ARCHIVES.get(suffix, "")
            if how == "zip":
                said += _unpack_zip(inp.path, tree, limits, held)
            else:
                said += extract_trees([_tar_of(inp.path, how)], tree, limits, spool=spool, owners=held)
        elif inp.kind == "debs":
            tars = []
            for deb, given in zip(inp.files, inp.givens or map(str, inp.files), strict=True):
                current = given
                tars.append(_deb_data(deb))
            current = inp.given
            said += extract_trees(tars, tree, limits, spool=spool, owners=held)
        else:
            raise AssembleError(f"unknown input kind {inp.kind!r}", where=inp.given)
        shutil.rmtree(spool)
        tree.chmod(0o755)
        os.replace(tree, dest)                      # onto an empty folder too: rename(2) allows it
    except ArchiveRefused as exc:
        if inp.kind == "debs" and exc.archive is not None:
            current = (inp.givens or tuple(map(str, inp.files)))[exc.archive]     # the package at fault
        too_big = bool(re.search(r"unpacked size|limit of|more than \d+ members", str(exc)))
        raise AssembleError(f"refused: {exc}", where=current,
                            fix="if it really holds that much, unpack it yourself, check it, and give the folder"
                            if too_big else "it is damaged or unsafe: download it again from its publisher") from None
    except OSError as exc:
        if full := paths.full_disk(exc, dest.parent, untouched=f" while unpacking {inp.given}"):
            raise full from None
        raise AssembleError(f"cannot unpack it ({exc.strerror or exc}"
                            f"{f': {exc.filename}' if exc.filename else ''})", where=current,
                            fix="check the space and permissions where it is unpacked") from None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if members is not None:
        names = tuple(Path(g).name for g in inp.givens) or tuple(f.name for f in inp.files)
        members.update((rel, names[g]) for rel, g in held.items())
    for line in said:
        if notes is not None:
            notes.append(f"{inp.given}: {line}")
        else:
            ui.info(f"{inp.given}: {line}")
    if inp.kind == "archive":
        top = list(dest.iterdir())
        if len(top) == 1 and top[0].is_dir() and not top[0].is_symlink():
            return top[0]
    return dest


def _tar_of(path: Path, how: str, offset: int = 0, length: int | None = None) -> TarStream:
    """The tar at path[offset:offset+length] (the whole file by default), compressed with `how`."""
    size = path.stat().st_size - offset if length is None else length
    return TarStream(path.name, functools.partial(streams.opened, path, offset, size, how), size)


# --- .deb: an ar archive of debian-binary, control.tar.*, data.tar.* -------------------------------

def _ar_members(deb: Path) -> list[tuple[str, int, int]]:
    """(name, offset, size) of each member; refuses anything that is not a well-formed ar archive."""
    size = deb.stat().st_size
    out = []
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise ArchiveRefused("not a Debian package (no ar header '!<arch>')")
        pos = 8
        while pos < size:
            f.seek(pos)
            head = f.read(60)
            if len(head) < 60 or head[58:60] != b"`\n":
                raise ArchiveRefused(f"damaged ar member header at offset {pos}")
            name = head[:16].decode("ascii", "replace").rstrip(" ")
            name = name[:-1] if name.endswith("/") and name != "/" else name   # GNU ar's trailing slash
            field = head[48:58].decode("ascii", "replace").strip()
            if not field.isdigit():
                raise ArchiveRefused(f"ar member {name!r} has a bad size field {field!r}")
            start, length = pos + 60, int(field)
            if start + length > size:
                raise ArchiveRefused(f"ar member {name!r} is truncated ({length} bytes announced, "
                                     f"{size - start} present)")
            out.append((name, start, length))
            pos = start + length + (length & 1)
    return out


def _deb_data(deb: Path) -> TarStream:
    """The package's data.tar, read where it lies in the ar container."""
    members = _ar_members(deb)
    names = [n for n, _, _ in members]
    if not members or names[0] != "debian-binary":
        raise ArchiveRefused("not a Debian package (its first member is not debian-binary)")
    with open(deb, "rb") as f:
        f.seek(members[0][1])
        if not f.read(min(members[0][2], 16)).startswith(b"2."):
            raise ArchiveRefused("not a Debian package of format 2.x (debian-binary)")
    data = [(n, o, s) for n, o, s in members if n.startswith("data.tar")]
    if len(data) != 1:
        raise ArchiveRefused("no data.tar member" if not data else
                             f"more than one data.tar member ({', '.join(n for n, _, _ in data)})")
    name, offset, length = data[0]
    how = DEB_DATA.get(name)
    if how is None:
        raise ArchiveRefused(f"{name}: unsupported compression (xz, zstd, gzip, bzip2 or none are read)")
    return _tar_of(deb, how, offset, length)


_CONTROL_MAX = 16 << 20       # a control.tar (control, md5sums, scripts) is kilobytes


def deb_owners(inp: Input, root: Path) -> dict[str, Owner]:
    """Resolved path in the unpacked root -> the .deb that shipped it (name, version, arch; its copyright
    under root/usr/share/doc/<name>/), from each package's control.tar: control and md5sums."""
    out: dict[str, Owner] = {}
    for deb in inp.files if inp.kind == "debs" else ():
        members = [m for m in _ar_members(deb) if m[0].startswith("control.tar")]
        if len(members) != 1 or members[0][2] > _CONTROL_MAX:
            continue
        name, offset, length = members[0]
        with open(deb, "rb") as f:
            f.seek(offset)
            blob = f.read(length)
        try:
            if name.endswith(".zst"):
                import zstandard
                blob = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)).read(_CONTROL_MAX)
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                wanted = [m for m in tar.getmembers() if m.isfile() and PurePosixPath(m.name).name in ("control", "md5sums")]
                texts = {PurePosixPath(m.name).name: data.read(_CONTROL_MAX).decode("utf-8", "replace")
                         for m in wanted if (data := tar.extractfile(m)) is not None}   # files: never None
        except (tarfile.TarError, OSError, EOFError, ValueError):
            continue
        fields = dict(re.findall(r"^(Package|Version|Architecture):\s*(\S+)", texts.get("control", ""), re.MULTILINE))
        if "Package" not in fields:
            continue
        owner = Owner("deb", fields["Package"], fields.get("Version"), fields.get("Architecture"),
                      str(root / DEB_DOC.lstrip("/") / fields["Package"]))
        for line in texts.get("md5sums", "").splitlines():
            rel = line.partition("  ")[2].strip()
            if rel and (root / rel).exists():
                out.setdefault(str((root / rel).resolve()), owner)
    return out


# --- zip --------------------------------------------------------------------------------------

_FILE_MODES = {stat.S_IFREG, 0}        # Windows zips and some tools write no file type: a file


def _zip_member(zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> tarfile.TarInfo:
    """One zip entry as the tar header the planning code reads."""
    name = zi.orig_filename
    if "\x00" in name:
        raise ArchiveRefused(f"member {name!r} has a NUL in its name")
    if "\\" in name:
        raise ArchiveRefused(f"member {name!r} has a backslash in its name (a Windows path)")
    if zi.flag_bits & 0x1:
        raise ArchiveRefused(f"member {name!r} is encrypted")
    mode = zi.external_attr >> 16 if zi.create_system == 3 else 0
    ti = tarfile.TarInfo(name)
    ti.mode = stat.S_IMODE(mode)
    if stat.S_ISLNK(mode):
        if zi.file_size > MAX_LINK_TARGET:
            raise ArchiveRefused(f"symlink {name!r} has a {zi.file_size}-byte target")
        target = zf.read(zi).decode("utf-8", "surrogateescape")
        if "\x00" in target or "\\" in target:
            raise ArchiveRefused(f"symlink {name!r} -> {target!r} has a NUL or a backslash in its target")
        ti.type, ti.linkname = tarfile.SYMTYPE, target
    elif stat.S_ISDIR(mode) or name.endswith("/"):
        ti.type = tarfile.DIRTYPE
    elif stat.S_IFMT(mode) in _FILE_MODES:
        ti.type, ti.size = tarfile.REGTYPE, zi.file_size
    else:
        raise ArchiveRefused(f"member {name!r} is a special file (mode {stat.filemode(mode)})")
    return ti


def _file_mode(ti: tarfile.TarInfo) -> int:
    """What tarfile's data filter keeps: rwx bits without group/other write, owner rw; no exec
    bits unless the owner's. A zip without unix bits gives 0o644."""
    mode = (ti.mode or 0o644) & 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _no_overlap(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> None:
    """Each member's local header and data end before the next one starts (the smallest header:
    30 bytes and the name); overlapping entries are how a zip unpacks to far more than it holds."""
    spans = sorted((zi.header_offset, zi.header_offset + 30 + len(zi.orig_filename.encode(
        "utf-8" if zi.flag_bits & 0x800 else "cp437", "surrogateescape")) + zi.compress_size, zi.orig_filename)
        for zi in infos)
    for (_, end, name), (start, _, other) in itertools.pairwise(spans):
        if end > start:
            raise ArchiveRefused(f"members {name!r} and {other!r} overlap in the file (a zip bomb)")
    if spans and spans[-1][1] > zf.start_dir:
        raise ArchiveRefused(f"member {spans[-1][2]!r} runs into the central directory")


def _unpack_zip(path: Path, tree: Path, limits: Limits, owners: dict[str, int]) -> list[str]:
    notes: list[str] = []
    packed = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > limits.members:
                raise ArchiveRefused(f"more than {limits.members} members")
            _no_overlap(zf, infos)
            members, total = [], 0
            for zi in infos:
                ti = _zip_member(zf, zi)
                if ti.isreg():
                    total += zi.file_size
                    limits.check(total, packed, f"member {zi.orig_filename!r}")
                    limits.check(zi.file_size, zi.compress_size, f"member {zi.orig_filename!r}")
                members.append(ti)
            (chosen,) = plan_tree([members], notes)
            root = os.path.realpath(tree)
            for i, ti in chosen:
                _write(zf, infos[i], ti, tree, root)
                owners[ti.name] = 0
    except ArchiveRefused:
        raise
    except _ZIP_ERRORS as exc:
        if is_full_disk(exc):
            raise                                   # the disk's fault, not the zip's
        if isinstance(exc, OSError) and not isinstance(exc, zipfile.BadZipFile) and exc.strerror:
            raise ArchiveRefused(f"cannot read or extract ({exc.strerror}"
                                 f"{f': {exc.filename!r}' if exc.filename else ''})") from None
        raise ArchiveRefused(f"unreadable zip ({type(exc).__name__}: {str(exc) or 'no detail'})") from None
    return notes


def _write(zf: zipfile.ZipFile, zi: zipfile.ZipInfo, ti: tarfile.TarInfo, tree: Path, root: str) -> None:
    """One planned member (the plan has refused any path through a link, so none is followed here;
    the checks below are a second line)."""
    target = tree / ti.name
    if os.path.commonpath([root, os.path.realpath(target.parent)]) != root:
        raise ArchiveRefused(f"member {zi.orig_filename!r} would be written outside the extraction folder")
    if ti.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if ti.issym():
        os.symlink(ti.linkname, target)
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    written = 0
    with os.fdopen(fd, "wb") as out, zf.open(zi) as src:
        while chunk := src.read(4 << 20):
            written += len(chunk)
            if written > zi.file_size:
                raise ArchiveRefused(f"member {zi.orig_filename!r} holds more than the {zi.file_size} bytes it announces")
            out.write(chunk)
    os.chmod(target, _file_mode(ti))
