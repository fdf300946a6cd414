"""Where things live: the packaged data folders and the user's cache."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from builder.errors import AssembleError, BuildFailed, is_full_disk

_PKG = Path(__file__).resolve().parent
PACKAGE_DIR = _PKG             # builder/ itself (a container build context copies it)
PROJECT_DIR = _PKG.parent      # the checkout (or site-packages) holding it


def builtin_data(name: str) -> Path:
    """A data file shipped inside the package (builder/data/): the policy, the feature registry."""
    return _PKG / "data" / name


def data_dir(name: str) -> Path:
    """A top-level data folder (recipes, patches, containers).

    Installed wheels carry them under builder/_data/; a source checkout or an
    editable install reads them from the repository root.
    """
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    return _PKG / "_data" / name


def cache_dir() -> Path:
    """$ASSEMBLE_CACHE, else $XDG_CACHE_HOME/assemble, else ~/.cache/assemble."""
    explicit = os.environ.get("ASSEMBLE_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        user_home = home()
        if user_home is None:
            raise AssembleError("no home directory to keep the cache in ($HOME is unset and this user has no "
                                "passwd entry)", fix="set ASSEMBLE_CACHE=DIR (or HOME / XDG_CACHE_HOME)")
        base = str(user_home / ".cache")
    return (Path(base) / "assemble").resolve()


def home() -> Path | None:
    """The user's home folder; None without $HOME and a passwd entry (a container's --user uid:gid)."""
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


# --- scratch folders ------------------------------------------------------------------
# Temporary folders live under the cache, named with the host and pid that made them, so a run
# killed with SIGKILL leaves nothing in /tmp and the next run can prove what is stale: a folder
# of this host whose pid is no longer alive (a cache shared between hosts, e.g. an NFS home, holds
# other hosts' live folders too). Nothing outside this folder is touched.

SCRATCH = "tmp"
_SCRATCH_NAME = re.compile(r"(?P<prefix>[a-z-]+-)(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[A-Za-z0-9_]+")


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def scratch_root() -> Path:
    return cache_dir() / SCRATCH


@contextlib.contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A fresh folder for this process (removed afterwards), under the cache when it is writable,
    else under the system's temporary folder."""
    if not re.fullmatch(r"[a-z-]+-", prefix):
        raise ValueError(f"scratch prefix {prefix!r}: lower-case words ending in '-'")
    try:
        root = scratch_root()
        root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"{prefix}{_host_tag()}-{os.getpid()}-", dir=root))
    except (OSError, AssembleError):
        path = Path(tempfile.mkdtemp(prefix=f"assemble-{prefix}{os.getpid()}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def clean_stale_scratch() -> list[Path]:
    """Remove scratch folders of runs that are gone (killed before they could clean up)."""
    removed: list[Path] = []
    host = _host_tag()
    try:
        entries = list(os.scandir(scratch_root()))
    except (OSError, AssembleError):   # no cache yet, or none can be found: nothing of ours to clean
        return removed
    for entry in entries:
        m = _SCRATCH_NAME.fullmatch(entry.name)
        if not m or m.group("host") != host or not entry.is_dir(follow_symlinks=False) or _alive(int(m.group("pid"))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # someone else's process: alive
        return True
    return True


SOCKET_PATH_BUDGET = 60      # of the 108 bytes a unix socket path may have: room for the names below it


def socket_parent() -> Path:
    """A temporary folder short enough to hold unix sockets: the process's own (TMPDIR) when its
    path leaves room, else /tmp (a build's TMPDIR sits deep in its output's staging folder)."""
    own = Path(tempfile.gettempdir())
    return own if len(str(own)) <= SOCKET_PATH_BUDGET else Path("/tmp")


def full_disk(exc: BaseException, where: str | os.PathLike[str] | None = None, *, fix: str | None = None,
              untouched: str = "") -> AssembleError | None:
    """A full disk or quota (ENOSPC, EDQUOT) met anywhere, as one line: where (`where`, else the
    file that failed; the cache when it lies there), how much is free, how to fix it; None for any
    other error. Never worded as a damaged input: the bytes were fine, the disk was not.
    `untouched` says what was kept whole (" while writing ...; the previous runtime is untouched")."""
    if not is_full_disk(exc) or not isinstance(exc, OSError):
        return None
    place = Path(os.fsdecode(where or exc.filename or "."))   # the caller's folder over a scratch file in it
    try:
        cache = cache_dir()
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
