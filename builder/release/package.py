"""Deterministic release archives of a runtime folder, with SHA256SUMS, an SBOM and provenance beside them.

Same runtime in, same bytes out: entries sorted, one fixed mtime (the pinned
commit's date), uid/gid 0 with no user names, modes normalised to 0755/0644, and
compressor headers without a time or a file name. Everything is written to a
temporary name and renamed into place, under a lock on the destination folder,
so an interrupted run leaves either the old files or the new ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import io
import json
import os
import platform
import re
import secrets
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, BinaryIO, cast

from builder import locks, paths, ui
from builder.digest import sha256_file
from builder.runtime import manifest
from builder.check.report import FAIL
from builder.errors import AssembleError, BuildFailed
from builder.config.recipe import SHA256_RE
from builder.config.upstream import toolkit_line
from builder.runtime import layout
from builder.runtime.layout import runtime_dir_name
from builder.runtime.manifest import Manifest
from builder import windows
from builder.release.formats import DEFAULT_FORMAT as DEFAULT_FORMAT, FORMATS as FORMATS, SUMS as SUMS  # read from here too
from builder.release.formats import WINDOWS_FORMAT as WINDOWS_FORMAT

if TYPE_CHECKING:
    from typing_extensions import Buffer

PART_TAG = ".part-"
_MACHINES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_PPC64": "ppc64le", "EM_RISCV": "riscv64",
             "EM_S390": "s390x"}
_GZIP_LEVEL = 6     # gzip's own default: -9 costs twice the time for ~1% on shared libraries
_ZSTD_LEVEL = 10     # ~ gzip -9 speed with a far better ratio on GPU libraries
SUMS_LINE = re.compile(rf"({SHA256_RE.pattern}) [ *](.+)")


@dataclass(frozen=True)
class PackageResult:
    archive: Path
    sha256: str
    size: int
    sbom: Path
    sums: Path
    provenance: Path


def epoch_for(m: Manifest) -> int:
    """The archive's one mtime: the pinned commit's date, else SOURCE_DATE_EPOCH."""
    t = m.llama_cpp.commit_time
    if t is not None and t >= 0:
        return t
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env is None and _repaired(m):
        raise AssembleError("the runtime was repaired from prebuilt binaries, which record no llama.cpp commit "
                            "date, so the archive has no fixed time", where="manifest.json: llama_cpp.commit_time",
                            fix="set SOURCE_DATE_EPOCH=<seconds>, e.g. the date of the upstream release the "
                                "binaries came from")
    if env is None:
        raise AssembleError("the runtime records no llama.cpp commit date (a source tree that is not git), so the "
                            "archive has no fixed time", where="manifest.json: llama_cpp.commit_time",
                            fix="set SOURCE_DATE_EPOCH=<seconds>, or build from a git checkout or the pinned mirrors")
    if not env.isdigit():
        raise AssembleError(f"SOURCE_DATE_EPOCH={env!r} is not a whole number of seconds",
                            fix="set SOURCE_DATE_EPOCH to e.g. $(git log -1 --format=%ct)")
    return int(env)


def runtime_arch(runtime: Path, m: Manifest) -> str:
    """The CPU architecture of the runtime's own executables (not of the machine packaging it)."""
    from builder.runtime.elf import read_elf     # here: the CLI starts without pyelftools
    if m.platform == windows.PLATFORM:
        return windows.ARCH              # verify refused anything else
    for rec in m.files:
        if rec.role == "own":
            info = read_elf(runtime / rec.path)
            if info is not None:
                return _MACHINES.get(info.machine, info.machine.removeprefix("EM_").lower())
    return platform.machine()


def archive_stem(runtime: Path, m: Manifest) -> str:
    g = m.gpu_runtimes
    toolkit = toolkit_line(g.cuda.version if g.cuda else None, g.rocm.version if g.rocm else None)
    return layout.archive_stem(layout.runtime_label(m.recipe.name, m.gpu_targets.hip), m.llama_cpp.sha,
                               runtime_arch(runtime, m), m.llama_cpp.build, toolkit, system=m.platform)


def _entries(runtime: Path, with_tests: bool = True) -> list[tuple[str, Path]]:
    """(name inside the runtime, path) for every folder, file and link, in a fixed order; without
    tests/ (left out as a whole, which integrity accepts) unless with_tests."""
    out = []
    for root, dirs, files in os.walk(runtime):
        if not with_tests and Path(root) == runtime and layout.TESTS_DIR in dirs:
            dirs.remove(layout.TESTS_DIR)
        dirs.sort()
        base = Path(root)
        for name in dirs + files:
            p = base / name
            out.append((p.relative_to(runtime).as_posix(), p))
    out.sort(key=lambda e: e[0].split("/"))
    return out


def _tarinfo(name: str, path: Path, mtime: int) -> tarfile.TarInfo:
    st = path.lstat()
    info = tarfile.TarInfo(name)
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(path)
        info.mode = 0o777
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    elif stat.S_ISREG(st.st_mode):
        info.size = st.st_size
        info.mode = 0o755 if st.st_mode & stat.S_IXUSR else 0o644
    else:
        raise AssembleError("not a file, folder or symlink", where=str(path),
                            fix="remove it from the runtime folder and rebuild")
    return info


class _Hashing(io.RawIOBase):
    """A write-only file that hashes what passes through it."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.h, self.n = f, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, b: Buffer) -> int:
        self.f.write(b)
        self.h.update(b)
        size = memoryview(b).nbytes
        self.n += size
        return size


@contextlib.contextmanager
def _compressed(raw: BinaryIO | _Hashing, fmt: str, mtime: int) -> Iterator[BinaryIO]:
    if fmt == "tar.gz":
        # filename="" and a fixed mtime: no name or wall-clock time in the gzip header
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime, compresslevel=_GZIP_LEVEL) as z:
            yield cast(BinaryIO, z)
    else:
        zstandard = _zstandard()
        # threads >= 1 selects zstd's multi-threaded format, whose bytes do not depend on the thread count
        c = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, threads=max(1, os.cpu_count() or 1), write_checksum=True)
        with c.stream_writer(raw, closefd=False) as z:
            yield cast(BinaryIO, z)       # a write-only stream: tarfile writes to it


def _zstandard() -> ModuleType:
    try:
        import zstandard
    except ImportError:
        raise AssembleError("tar.zst needs the zstandard Python package", fix="pip install zstandard, or use "
                            "--format tar.gz") from None
    return zstandard


_ZIP_EPOCH = 315532800 + 86400   # zip's DOS times start in 1980 (a day later: no time zone pushes it before)


def _write_zip(runtime: Path, raw: BinaryIO, mtime: int, top: str, with_tests: bool = True) -> None:
    """Entries sorted, one fixed time, unix modes, no extra fields: the same bytes on every machine
    with the same zlib."""
    import time
    import zipfile
    stamp = time.gmtime(max(mtime, _ZIP_EPOCH))[:6]

    def info(name: str, mode: int) -> zipfile.ZipInfo:
        zi = zipfile.ZipInfo(name, date_time=stamp)
        zi.create_system = 3
        zi.external_attr = mode << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        return zi

    with zipfile.ZipFile(raw, "w", compresslevel=_GZIP_LEVEL) as zf:
        zf.writestr(info(f"{top}/", stat.S_IFDIR | 0o755), b"")
        for name, path in _entries(runtime, with_tests):
            t = _tarinfo(name, path, mtime)          # the same refusals and modes as the tar formats
            if t.isdir():
                zf.writestr(info(f"{top}/{name}/", stat.S_IFDIR | 0o755), b"")
            elif t.issym():
                raise AssembleError("a symlink in a Windows runtime", where=str(path),
                                    fix="repair the runtime again: Windows runtimes hold plain files only")
            else:
                with open(path, "rb") as src, zf.open(info(f"{top}/{name}", stat.S_IFREG | t.mode), "w") as out:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)


def write_archive(runtime: Path, dest: Path, fmt: str, mtime: int, top: str,
                  with_tests: bool = True) -> tuple[str, int]:
    """Write the archive to `dest`; returns (sha256, size). with_tests=False leaves tests/ out."""
    if fmt == WINDOWS_FORMAT:
        with open(dest, "wb") as f:
            raw = _Hashing(f)
            _write_zip(runtime, io.BufferedWriter(raw), mtime, top, with_tests)
            f.flush()
            os.fsync(f.fileno())
        return raw.h.hexdigest(), raw.n
    with open(dest, "wb") as f:
        raw = _Hashing(f)
        with _compressed(raw, fmt, mtime) as z:
            with tarfile.open(fileobj=z, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                tar.addfile(_tarinfo(top, runtime, mtime))
                for name, path in _entries(runtime, with_tests):
                    info = _tarinfo(f"{top}/{name}", path, mtime)
                    if info.isreg():
                        with open(path, "rb") as src:
                            tar.addfile(info, src)
                    else:
                        tar.addfile(info)
        f.flush()
        os.fsync(f.fileno())
    return raw.h.hexdigest(), raw.n


def _parse_sums(text: str) -> dict[str, str]:
    return {m.group(2): m.group(1) for m in map(SUMS_LINE.fullmatch, text.splitlines()) if m}


WRITTEN = "written"   # the ledger's kind for an output put in place: what a later run may replace


class _Temps:
    """The files of packaging runs in the destination folder, recorded in one ledger in the cache.

    Temporaries: each recorded before it is made, made with O_EXCL under a name of its own, and
    removed unless renamed into place. A killed run's temporaries are removed by the next run only
    as recorded (the same path and inode): a user's file is never taken for one by its name.
    Outputs: each recorded with its inode and sha256 before it is renamed into place (the rename
    keeps the inode); a later run replaces a file of an output's name only while it still is that
    very file with those bytes (ours()). Until the rename is done both the old output and the new
    are recorded, so a run killed there leaves nothing of its own unproven."""

    def __init__(self, dest: Path):
        self.dest = dest
        self.record = paths.cache_dir() / "packages" / f"{locks.place_key(dest)}.json"
        self.open: dict[Path, locks.Entry] = {}
        self.written: dict[Path, list[locks.Entry]] = {}

    def _save(self) -> None:
        with contextlib.suppress(OSError):   # no record (a read-only cache): only a killed run's files stay
            entries = tuple(self.open.values()) + tuple(e for es in self.written.values() for e in es)
            locks.save(self.record, locks.Ledger(str(self.dest), entries))

    def clear_recorded(self) -> None:
        """Remove what a killed earlier run recorded and left, keep the record of earlier outputs
        (call it holding the lock)."""
        with contextlib.suppress(locks.LedgerUnreadable):
            for e in locks.load(self.record, self.dest).entries:
                p = Path(e.path)
                if p.parent != self.dest:
                    continue
                if e.kind == WRITTEN:
                    if e.holds():            # an output since deleted or replaced is forgotten
                        self.written.setdefault(p, []).append(e)
                elif e.holds() or (e.ino is None and _fresh_file(p, e.time)):
                    p.unlink()
        self._save()

    def ours(self, path: Path) -> bool:
        """`path` is an output an earlier run put there, untouched since: the recorded inode, the recorded bytes."""
        return any(e.sha256 is not None and e.holds() and sha256_file(path) == e.sha256
                   for e in self.written.get(path, ()))

    def refuse_foreign(self, finals: list[Path]) -> None:
        """Before anything is written: a file of an output's name that no run of ours left is the user's."""
        for p in finals:
            if os.path.lexists(p) and not self.ours(p):
                raise AssembleError("is in the way and was not written by assemble package: it is never replaced",
                                    where=str(p), fix="choose another --out-dir, or move that file away")

    def new(self, final: Path) -> tuple[Path, BinaryIO]:
        """An open binary file to write `final`'s bytes to."""
        tmp = final.with_name(f".{final.name}{PART_TAG}{os.getpid()}-{secrets.token_hex(4)}")
        self.open[tmp] = locks.made("part", tmp)
        self._save()
        f = open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb")  # noqa: SIM115 -- the caller closes it
        self.open[tmp] = locks.made("part", tmp, mark=locks.mark(tmp))
        self._save()
        return tmp, f

    def write(self, final: Path, data: bytes) -> Path:
        tmp, f = self.new(final)
        with f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def put(self, tmp: Path, final: Path, sha256: str) -> None:
        new = dataclasses.replace(locks.made(WRITTEN, tmp, sha256=sha256), path=str(final))
        self.written[final] = [*self.written.get(final, ()), new]
        self._save()
        os.replace(tmp, final)
        del self.open[tmp]
        locks.unmark(final)
        self.written[final] = [new]
        self._save()

    def remove_left(self) -> None:
        for tmp, e in list(self.open.items()):
            if e.holds():
                tmp.unlink()
            del self.open[tmp]
        self._save()


def _fresh_file(p: Path, since: float) -> bool:
    """A regular file made no earlier than its record (the record comes first)."""
    try:
        st = p.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_mtime >= since - 2


@contextlib.contextmanager
def _writing(dest: Path) -> Iterator[_Temps]:
    """One packaging run per destination folder (SHA256SUMS is shared by every archive in it): an
    flock on the folder itself, so no lock file is left there."""
    with locks.exclusive_folder(dest, f"waiting for another assemble package run writing to {dest} ..."):
        temps = _Temps(dest)
        temps.clear_recorded()
        try:
            yield temps
        finally:  # a failed run (a full disk) leaves no partial file behind
            temps.remove_left()


def _out_dir(runtime: Path, dest: Path) -> Path:
    """The resolved --out-dir, refused when writing there would change the runtime or cannot work."""
    real, inside = Path(os.path.realpath(dest)), Path(os.path.realpath(runtime))
    if real == inside or real.is_relative_to(inside):
        raise AssembleError("--out-dir is inside the runtime folder: the archive would change the runtime it "
                            "packs", where=str(real), fix="choose a folder outside it, e.g. --out-dir dist")
    for above in [real, *real.parents]:
        if os.path.lexists(above):
            if not above.is_dir():
                raise AssembleError(f"--out-dir {'is' if above == real else 'is under'} a file, not a folder",
                                    where=str(above), fix="choose a folder for --out-dir")
            break
    return real


def _plain_name(stem: str, runtime: Path) -> str:
    """The archive's stem comes from the manifest: it must be a plain file name, never a path."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", stem):
        raise BuildFailed(f"the manifest makes the archive name {stem!r}, which is not a plain file name",
                          where=str(runtime / manifest.NAME), fix="rebuild the runtime with assemble build")
    return stem


def _sums_lines(path: Path) -> dict[str, str]:
    """The lines of the SHA256SUMS an earlier run wrote there (refuse_foreign proved it ours), to keep."""
    return _parse_sums(path.read_text()) if os.path.lexists(path) else {}


def _io_error(exc: OSError, dest: Path) -> AssembleError:
    where = str(exc.filename or dest)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return BuildFailed("no space left on the device while writing the archive", where=where,
                           fix="free space there, or choose another --out-dir")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return AssembleError(f"cannot write the archive ({exc.strerror})", where=where,
                             fix="choose a folder you can write to (--out-dir DIR)")
    return BuildFailed(f"cannot write the archive ({exc.strerror or exc})", where=where,
                       fix="check the folder and the disk")


def package(runtime: Path, dest: Path, fmt: str | None = None, with_tests: bool = False) -> PackageResult:
    """Archive a verified runtime folder into `dest`, with an SBOM and SHA256SUMS beside it.
    fmt None: tar.zst for a Linux runtime, zip for a Windows one. The runtime's tests/ (test-backend-ops
    and its module links) goes in only with_tests, so a shipped archive does not grow by it; its
    manifest.json goes in unchanged either way (its digest is the runtime's identity) and integrity
    accepts tests/ absent as a whole."""
    from builder.release import provenance, sbom

    if fmt is not None and fmt not in FORMATS:
        raise AssembleError(f"unknown archive format {fmt!r}", fix=f"use one of: {', '.join(FORMATS)}")
    runtime = Path(runtime)
    if not runtime.is_dir():
        raise AssembleError("no such runtime folder", where=str(runtime), fix="give the path of a runtime-<recipe>/ folder")
    if not os.path.lexists(runtime / manifest.NAME):   # the wrong folder given: bad input, not a broken runtime
        raise AssembleError("no manifest.json: not a runtime folder made by assemble build", where=str(runtime),
                            fix="give the path of a runtime-<recipe>/ folder")
    data = Manifest.load(runtime)          # ManifestInvalid: one line, exit 1
    if with_tests and not os.path.isdir(runtime / layout.TESTS_DIR):
        raise AssembleError(f"--with-tests: the runtime has no {layout.TESTS_DIR}/ folder", where=str(runtime),
                            fix="build it with [tests] backend_ops = true (the default with a GPU backend), or "
                                "package it without --with-tests")
    fmt = _format_for(data, fmt)
    _require_verified(runtime, data)
    _require_licences(runtime, data)
    if fmt == "tar.zst":
        _zstandard()
    mtime = epoch_for(data)
    stem = _plain_name(archive_stem(runtime, data), runtime)
    dest = _out_dir(runtime, Path(dest))
    archive = dest / f"{stem}.{fmt}"
    bom_path = dest / f"{stem}.cdx.json"
    prov_path = dest / f"{stem}{provenance.SUFFIX}"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        with _writing(dest) as temps:
            temps.refuse_foreign([archive, bom_path, prov_path, dest / SUMS])
            sums = _sums_lines(dest / SUMS)   # other archives' lines are kept
            ui.step(f"package {runtime} -> {archive.name}")
            tmp, f = temps.new(archive)
            f.close()
            digest, size = write_archive(runtime, tmp, fmt, mtime, top=runtime_folder_name(data), with_tests=with_tests)
            shipped = data if with_tests else without_tests(data)   # what the archive holds: all its papers list
            bom = sbom.build(runtime, shipped, name=stem, epoch=mtime)
            bom_bytes = (json.dumps(bom, indent=2) + "\n").encode()
            sums[archive.name] = digest
            sums[bom_path.name] = hashlib.sha256(bom_bytes).hexdigest()
            prov = provenance.statement(shipped, archive.name, digest, {bom_path.name: sums[bom_path.name]},
                                        folder=runtime_folder_name(data),
                                        manifest_sha256=sha256_file(runtime / manifest.NAME))
            prov_bytes = (json.dumps(prov, indent=2, sort_keys=True) + "\n").encode()
            sums[prov_path.name] = hashlib.sha256(prov_bytes).hexdigest()
            sums_bytes = "".join(f"{h}  {n}\n" for n, h in sorted(sums.items())).encode()
            # Every byte is on disk before the first rename: the renames are the only window.
            sums_sha = hashlib.sha256(sums_bytes).hexdigest()
            for src, dst, sha in [(tmp, archive, digest),
                                  (temps.write(bom_path, bom_bytes), bom_path, sums[bom_path.name]),
                                  (temps.write(prov_path, prov_bytes), prov_path, sums[prov_path.name]),
                                  (temps.write(dest / SUMS, sums_bytes), dest / SUMS, sums_sha)]:
                temps.put(src, dst, sha)
    except OSError as exc:
        raise _io_error(exc, dest) from None
    ui.info(f"{archive} ({ui.fmt_bytes(size)}, sha256 {digest[:16]}...), {bom_path.name}, {prov_path.name}, {SUMS}")
    return PackageResult(archive=archive, sha256=digest, size=size, sbom=bom_path, sums=dest / SUMS,
                         provenance=prov_path)


def without_tests(m: Manifest) -> Manifest:
    """The manifest as far as an archive without tests/ holds it: what its SBOM lists."""
    return dataclasses.replace(m, files=tuple(f for f in m.files if not layout.in_tests(f.path)),
                               symlinks=tuple(s for s in m.symlinks if not layout.in_tests(s.path)))


def _require_licences(runtime: Path, m: Manifest) -> None:
    """A release redistributes every file it holds: each must come with its licence text (licenses/)."""
    missing = m.unlicensed()
    if not missing:
        return
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise AssembleError(f"no licence known for {', '.join(missing[:3])}{more}: a release cannot redistribute "
                        "it without one", where=str(runtime / manifest.NAME),
                        fix="state its licence text in the recipe ([bundle.licenses] \"libfoo.so.*\" = "
                            "\"/path/to/LICENSE\") and build again; for a repaired runtime, give the input that "
                            "ships it with its licence (a .deb with its copyright, a zip with the vendor's "
                            "LICENSE beside the library)")


def runtime_folder_name(m: Manifest) -> str:
    """The folder an archive unpacks to: runtime-<recipe>/ (runtime-<name>-windows-x64/), as written."""
    return runtime_dir_name(m.recipe.name) + (windows.FOLDER_SUFFIX if m.platform == windows.PLATFORM else "")


def _format_for(m: Manifest, fmt: str | None) -> str:
    if m.platform != windows.PLATFORM:
        if fmt == WINDOWS_FORMAT:
            raise AssembleError("zip is for Windows runtimes: it cannot keep a Linux runtime's symlinks",
                                fix="use --format tar.zst (the default) or tar.gz")
        return fmt or DEFAULT_FORMAT
    if fmt not in (None, WINDOWS_FORMAT):
        raise AssembleError(f"a Windows runtime is packaged as zip, not {fmt}", fix="drop --format, or use --format zip")
    return WINDOWS_FORMAT


def _repaired(m: Manifest) -> bool:
    return m.llama_cpp.source.kind == "prebuilt"


def _require_verified(runtime: Path, m: Manifest) -> None:
    """One gate for shipping: every check `verify --static` runs, through verify's own entry point (one
    home for the checks). A runtime that fails one is never archived: exit 1, as verify exits for it."""
    from builder.check.verify import failed_lines, verify_runtime
    report = verify_runtime(runtime, static=True)
    if report.passed:
        return
    failed = sum(c.status == FAIL for c in report.checks)
    remake = "repair it again from its inputs" if _repaired(m) else "rebuild it with assemble build"
    raise BuildFailed(f"the runtime fails verify --static ({failed} check(s), below): it is not packaged",
                      where=str(runtime), fix=f"{remake}; never edit a runtime by hand",
                      details=failed_lines(report))
