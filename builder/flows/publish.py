"""Safe output folders: refuse what is not ours, one writer at a time, build beside, swap in.

`--out` is checked before anything is fetched or compiled (check_destination): it must be a new
folder, an empty one, or a runtime this tool made (a valid manifest listing exactly what is
there). `/`, system folders, the home and working directories (or a parent of them), the cache,
the folders a build reads, a mount point, a symlink and a regular file are refused.

A runtime is assembled in a sibling folder (same filesystem, so the final rename is atomic) and
swapped in with one renameat2(RENAME_EXCHANGE) where the filesystem has it; an existing runtime
is moved aside, never deleted unless --keep asks. Every folder made beside the output (staging,
moved aside, being deleted) is recorded by exact path, device, inode, pid and time in a ledger in
the cache, next to the lock and the swap journal: recovery and --keep act only on those records,
never on a name, so a user's look-alike folder is never touched. Nothing is written into the
user's folders but the runtime itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builder import locks, paths, ui
from builder.errors import AssembleError, BuildFailed

if TYPE_CHECKING:
    from builder.check.report import Report

STAGING_TAG = ".assembling-"
OLD_TAG = ".previous-"
DELETING_TAG = ".deleting-"
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
# Held back while the swap and its record change together: a Ctrl-C then lands before or after.
_DEFERRED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
_PICK = "choose a new or empty folder for --out (the default is ./runtime-<recipe>)"

# A runtime never replaces these, even empty; inside the kernel's and the boot's folders not at all.
# Other top-level names (/out, /runtime-cpu in a container) follow the ordinary rules.
_SYSTEM = frozenset(
    [f"/{d}" for d in ("bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "lost+found", "media",
                       "mnt", "nix", "opt", "proc", "root", "run", "sbin", "snap", "srv", "sys", "tmp", "usr", "var")]
    + [f"/usr/{d}" for d in ("bin", "games", "include", "lib", "lib32", "lib64", "libexec", "libx32", "local",
                           "sbin", "share", "src")]
    + [f"/usr/local/{d}" for d in ("bin", "etc", "games", "include", "lib", "lib64", "libexec", "man", "sbin",
                                   "share", "src")]
    + [f"/var/{d}" for d in ("backups", "cache", "lib", "local", "lock", "log", "mail", "opt", "run", "spool",
                             "tmp", "www")])
_NEVER_INSIDE = ("/proc", "/sys", "/dev", "/run", "/boot", "/etc")


@dataclass(frozen=True)
class Target:
    """A checked output: where the runtime goes, and where its lock and ledger live (the cache)."""
    path: Path
    state: Path      # <cache>/outputs/<key>; the lock is <key>.lock, the ledger <key>.json

    @property
    def lock(self) -> Path:
        return self.state.with_suffix(".lock")

    @property
    def ledger(self) -> Path:
        return self.state.with_suffix(".json")


@dataclass(frozen=True)
class Staging:
    path: Path
    ident: tuple[int, int]    # (device, inode): removed only while the path still is this folder


@dataclass(frozen=True)
class Swapped:
    aside: Path | None               # where the previous runtime went (None: there was none)
    removed: tuple[Path, ...] = ()   # moved-aside runtimes --keep deleted


# --- where a runtime may go -------------------------------------------------------------

def check_destination(out: Path | str, *, cache: Path, source: Path | None = None,
                      inputs: Iterable[tuple[str, Path]] = ()) -> Target:
    """The resolved --out, or a one-line refusal (exit 2). Reads only; call it before the lock and
    before anything is fetched or compiled. The output may be neither inside the cache or the
    --source tree nor hold them; `inputs` are (words, path) the run also reads (--unit-from,
    --lib-path, repair's folders, archives and .debs): the output may be none of them, hold none
    and lie inside none (what a run reads is never written)."""
    path = _absolute(out)
    if path.is_symlink():
        raise _refuse(path, f"--out is a symlink (to {os.readlink(path)}); a link is never replaced",
                      "give the real folder, or choose a new or empty folder for --out")
    _check_kind(path)
    if _is_system(path):
        raise _refuse(path, "--out is a system folder; a runtime never replaces one", _PICK)
    cache = Path(os.path.realpath(cache))
    homes = [("your home directory", home)] if (home := paths.home()) is not None else []
    for words, folder in [("the working directory", Path.cwd()), *homes,
                          ("the assemble installation", paths.PROJECT_DIR), *inputs]:
        _not_holding(path, words, Path(os.path.realpath(folder)))
    for words, folder in inputs:
        folder = Path(os.path.realpath(folder))
        if _inside(path, folder):
            raise _refuse(path, f"--out is inside {words} ({folder}); what a run reads is never written",
                          "choose an --out outside every input")
    for words, folder in [("the assemble cache", cache)] + ([("the --source tree", source)] if source else []):
        folder = Path(os.path.realpath(folder))
        _not_holding(path, words, folder)
        if _inside(path, folder):   # writing there would change what the build reads, or the cache's state
            raise _refuse(path, f"--out is inside {words} ({folder})", _PICK)
    if path.exists() and os.path.ismount(path):
        raise _refuse(path, "--out is a mount point: it cannot be renamed, so no runtime can be swapped in",
                      f"choose a new folder inside it, e.g. --out {path / 'runtime-<recipe>'}")
    existing(path)
    return Target(path, cache / "outputs" / locks.place_key(path))


def check_inputs(inputs: Iterable[str]) -> None:
    """check_input for each folder a run reads everything under (repair's inputs); first of all,
    before any of them is even listed."""
    cache = paths.cache_dir()
    for given in inputs:
        check_input(given, cache=cache)


def check_input(given: str, *, cache: Path) -> None:
    """Refuse a folder to read from that is `/`, a system folder (the rule --out follows), the home,
    the cache, or one that holds the home or the cache: reading every file under it would walk the
    whole system or read assemble's own state as llama.cpp. Reads only; a file passes (a .deb in
    /var/cache/apt/archives is an ordinary input)."""
    raw = Path(given).expanduser()
    if not raw.is_dir():
        return
    path = Path(os.path.realpath(raw))
    fix = "give the build folder, release archive or .deb files themselves"
    if path == Path("/"):
        raise AssembleError("an input is the root folder; assemble reads every file under an input", where=given,
                            fix=fix)
    homes = [("your home directory", home)] if (home := paths.home()) is not None else []
    for words, folder in [("the assemble cache", cache), *homes]:
        folder = Path(os.path.realpath(folder))
        if path == folder or _inside(folder, path):
            raise AssembleError(f"an input is {words}" if path == folder else f"an input holds {words} ({folder})",
                                where=given, fix=fix)
    if _is_system(path):
        named = "" if str(path) == given.rstrip("/") else f" ({path})"
        raise AssembleError(f"an input is a system folder{named}; assemble reads every file under an input",
                            where=given, fix=fix)


def _absolute(out: Path | str) -> Path:
    """Absolute, with every parent resolved but the last name kept (so a symlink shows as one)."""
    try:
        raw = Path(os.getcwd(), Path(out).expanduser())
    except RuntimeError:     # ~someone who does not exist
        raise AssembleError("--out names a home directory that does not exist", where=str(out), fix=_PICK) from None
    if raw.name in ("", ".", ".."):
        return Path(os.path.realpath(raw))
    return Path(os.path.realpath(raw.parent)) / raw.name


def _check_kind(path: Path) -> None:
    for above in path.parents:                 # nearest first
        if above.exists():
            if not above.is_dir():
                raise _refuse(path, f"--out is under {above}, which is a file, not a folder", _PICK)
            break
    if path.exists() and not path.is_dir():
        raise _refuse(path, "--out is an existing file, not a folder; it is never replaced", _PICK)


def _is_system(path: Path) -> bool:
    return (path == Path("/") or str(path) in _SYSTEM
            or any(path == Path(p) or _inside(path, Path(p)) for p in _NEVER_INSIDE))


def _inside(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _not_holding(path: Path, words: str, folder: Path) -> None:
    if path == folder:
        raise _refuse(path, f"--out is {words}", _PICK)
    if _inside(folder, path):
        raise _refuse(path, f"--out holds {words} ({folder})", _PICK)


def existing(path: Path, *, during: bool = False) -> str:
    """What is at `path`: 'new', 'empty', or 'runtime' (one this tool made, exactly as its manifest
    says); anything else is refused, naming what is in the way."""
    from builder.runtime.manifest import Manifest, ManifestInvalid, check_files

    if not os.path.lexists(path):
        return "new"
    if path.is_symlink() or not path.is_dir():
        raise _refuse(path, "--out is no longer a folder" if during else "--out is not a folder", _PICK)
    changed = " (it changed during the build; nothing was replaced)" if during else ""
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise _refuse(path, f"--out cannot be read ({exc.strerror})", _PICK) from None
    if not names:
        return "empty"
    try:
        problems = check_files(path, Manifest.load(path), hashes=False)
    except ManifestInvalid:
        example = "manifest.json, not one assemble wrote" if "manifest.json" in names else names[0]
        raise _refuse(path, f"--out is a folder assemble did not make (it holds {example}){changed}; only an "
                      "empty folder or a runtime assemble built is replaced", _PICK) from None
    if problems:
        raise _refuse(path, f"--out holds a runtime that no longer matches its manifest ({problems[0]}){changed}; "
                      "it is not replaced", "move the added files out of it, or " + _PICK)
    return "runtime"


def _refuse(path: Path, what: str, fix: str) -> AssembleError:
    return AssembleError(what, where=str(path), fix=fix)


# --- one writer per output ---------------------------------------------------------------

@contextlib.contextmanager
def locked(target: Target, wait: bool = True) -> Iterator[None]:
    """An exclusive lock for one output (a file in the cache, never beside the output). Disk-full,
    read-only and permission errors met while holding it become one clear line, not a traceback."""
    busy = None if wait else AssembleError("another assemble run is writing this runtime", where=str(target.path),
                                           fix="wait for it to finish, or drop --no-wait")
    with contextlib.ExitStack() as stack:
        try:
            target.lock.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(locks.exclusive(target.lock, f"waiting for another assemble run writing "
                                                f"{target.path} ...", busy))
        except OSError as exc:
            raise AssembleError(f"cannot create the output's lock in the cache ({exc.strerror})",
                                where=str(target.lock), fix="set ASSEMBLE_CACHE to a folder you can write") from None
        try:
            yield
        except OSError as exc:
            translated = _as_error(exc, target.path)
            if translated is None:
                raise
            raise translated from exc


def _as_error(exc: OSError, out: Path) -> AssembleError | None:
    """The user-fixable OSErrors of writing a runtime, as one line; None for anything else (a bug)."""
    where = exc.filename or str(out)
    if full := paths.full_disk(exc, out, untouched=" while writing the runtime; the previous runtime is untouched",
                         fix="free space there, or choose --out on another disk"):
        return full
    if exc.errno == errno.EROFS:
        return AssembleError("the output folder is on a read-only filesystem", where=str(where),
                             fix="choose an output folder you can write to (--out DIR)")
    if exc.errno in (errno.EACCES, errno.EPERM) and str(where).startswith(str(out.parent)):
        return AssembleError(f"cannot write the output ({exc.strerror})", where=str(where),
                             fix="choose an output folder you can write to (--out DIR)")
    return None


# --- the ledger -----------------------------------------------------------------------------

def _load(target: Target) -> locks.Ledger:
    try:
        return locks.load(target.ledger, target.path)
    except locks.LedgerUnreadable as exc:
        # Not ours to trust: act on nothing it names (every folder stays), start a fresh record.
        ui.warn(f"the record of folders made beside {target.path} is unreadable ({exc}); leftovers of "
                "earlier runs there are left alone")
        os.replace(target.ledger, target.ledger.with_suffix(f".unreadable-{int(time.time())}"))
        return locks.Ledger(str(target.path))


def _save(target: Target, ledger: locks.Ledger) -> None:
    locks.save(target.ledger, ledger)


def clear_leftovers(target: Target) -> None:
    """Finish or undo a swap that was interrupted, then remove the staging and half-deleted folders
    of interrupted runs: only those the ledger names whose path still is the recorded folder.
    Call it holding the lock."""
    ledger = _load(target)
    if ledger.swap:
        try:
            ledger = _recover_swap(target, ledger)
        except (KeyError, TypeError, ValueError):   # a journal we cannot read: touch nothing it names
            ui.warn(f"an interrupted swap of {target.path} could not be read back; no folder beside it is touched")
            ledger = locks.Ledger(ledger.place, ledger.entries)
    kept = []
    for e in ledger.entries:
        if e.kind == "aside":
            if e.holds():
                kept.append(e)          # a moved-aside runtime: kept until --keep says otherwise
        elif e.kind == "deleting" and not e.holds() and e.was and e.holds(e.was):
            kept.append(locks.Entry("aside", e.was, e.dev, e.ino, e.pid, e.time, mark=e.mark))   # never renamed
        elif e.holds():
            ui.detail(f"removing the leftover of an interrupted run: {e.path}")
            shutil.rmtree(e.path, ignore_errors=True)
            if os.path.lexists(e.path):
                kept.append(e)
        elif e.ino is None and _empty_dir(Path(e.path)):
            os.rmdir(e.path)            # recorded, made, killed before its inode was: empty, so nothing is lost
    _save(target, locks.Ledger(ledger.place, tuple(kept)))


def _empty_dir(p: Path) -> bool:
    try:
        return p.is_dir() and not p.is_symlink() and not os.listdir(p)
    except OSError:
        return False


def _recover_swap(target: Target, ledger: locks.Ledger) -> locks.Ledger:
    """A swap killed half-way (SIGKILL, power): put the new runtime in place if it was verified and
    staged, else the old one back; record where the old one is."""
    out, j = target.path, ledger.swap
    assert j is not None, "called with a swap in the journal"
    staging, aside = Path(j["staging"]), Path(j["aside"])
    new, old = tuple(j["new"]), tuple(j["old"])
    if locks.identity(out) == new:
        if locks.identity(staging) == old and not os.path.lexists(aside):
            _rename_noreplace(staging, aside)
            ui.info(f"finished an interrupted swap: previous runtime moved aside to {aside}")
    elif locks.identity(out) is None:
        if locks.identity(staging) == new:
            _rename_noreplace(staging, out)
            ui.info(f"finished an interrupted swap: {out}")
        elif locks.identity(aside) == old:
            _rename_noreplace(aside, out)
            ui.info(f"undid an interrupted swap: {out} is the previous runtime again")
    now = locks.Ledger(ledger.place, ledger.entries)   # the journal is done with
    if locks.identity(staging) != new:
        now = now.without(staging)                     # the staged runtime went in (or away)
    for where in (aside, staging):
        if locks.identity(where) == old:
            now = now.plus(locks.Entry("aside", str(where), *old, pid=os.getpid(), time=time.time()))
    return now


# --- staging and swap ---------------------------------------------------------------------

@contextlib.contextmanager
def staged(target: Target) -> Iterator[Staging]:
    """A fresh recorded sibling folder to build the runtime in. Made at once, so an unwritable --out
    fails before anything compiles. On any error or Ctrl-C before the swap it is removed (only while
    it still is that folder), and the message says that the output was not touched."""
    made_parents = _make_parents(target.path.parent)
    staging = _make_staging(target)
    try:
        yield staging
    except BaseException as exc:
        if locks.identity(target.path) == staging.ident:
            raise                        # swapped in: swap_in has said what happened
        _discard(target, staging)
        for p in reversed(made_parents):
            with contextlib.suppress(OSError):
                p.rmdir()
        if isinstance(exc, KeyboardInterrupt):
            raise AssembleError("interrupted before the swap: the output was not touched and the partial "
                                "runtime was removed", where=str(target.path), code=130) from None
        raise


def _make_parents(folder: Path) -> list[Path]:
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for p in reversed(missing):
        p.mkdir()
    return missing


def _make_staging(target: Target) -> Staging:
    out = target.path
    path = out.parent / f"{out.name}{STAGING_TAG}{os.getpid()}-{secrets.token_hex(3)}"
    _save(target, _load(target).plus(locks.made("staging", path)))   # intended first: a kill leaves no orphan
    try:
        path.mkdir()
    except OSError as exc:
        _save(target, _load(target).without(path))
        raise AssembleError(f"cannot create the output ({exc.strerror})", where=str(out.parent),
                            fix="choose an output folder you can write to (--out DIR)") from None
    entry = locks.made("staging", path, mark=locks.mark(path))
    _save(target, _load(target).plus(entry))
    assert entry.dev is not None and entry.ino is not None   # made just above
    return Staging(path, (entry.dev, entry.ino))


def _discard(target: Target, staging: Staging) -> None:
    if locks.identity(staging.path) == staging.ident:
        shutil.rmtree(staging.path, ignore_errors=True)
    if not os.path.lexists(staging.path) or locks.identity(staging.path) != staging.ident:
        with contextlib.suppress(OSError):
            _save(target, _load(target).without(staging.path))


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and termination signals until the swap is done; the first one held is delivered on
    leaving. Python runs signal handlers in the main thread whichever thread the kernel picked (a
    copy or probe pool may still be alive), so a mask on this thread alone is not enough: the
    handlers themselves are swapped for ones that only remember the signal."""
    if threading.current_thread() is not threading.main_thread():   # handlers can only be set there
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return
    held: list[int] = []
    previous = {s: signal.getsignal(s) for s in _DEFERRED}
    for s in _DEFERRED:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])   # now, to the handler that was there (Ctrl-C: KeyboardInterrupt)


@functools.cache
def _renameat2() -> Any:                 # the C function (ctypes), or None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    return fn


def _rename2(a: Path, b: Path, flags: int) -> bool:
    """renameat2; False where the kernel, libc or filesystem cannot."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the kernel, libc or filesystem cannot."""
    return _rename2(a, b, _RENAME_EXCHANGE)


def _rename_noreplace(a: Path, b: Path) -> None:
    """Rename, never onto something already there (a plain rename would replace an empty folder)."""
    if not _rename2(a, b, _RENAME_NOREPLACE):
        if os.path.lexists(b):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(b))
        os.rename(a, b)


def _aside_name(out: Path) -> Path:
    base = f"{out.name}{OLD_TAG}{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    aside, n = out.parent / base, 0
    while os.path.lexists(aside):   # two swaps in one second by one process (a library caller)
        n += 1
        aside = out.parent / f"{base}-{n}"
    return aside


def swap_in(target: Target, staging: Staging, keep: int | None = None,
            protect: Iterable[tuple[str, Path]] = ()) -> Swapped:
    """Put the staged runtime at the output. What is there must still be empty or a runtime of ours
    (checked again: the user may have put files there during the build); a runtime moves aside.
    A Ctrl-C during the swap is held until it is complete and recorded. `protect`: (words, path)
    this run reads, which --keep never deletes."""
    out = target.path
    before = existing(out, during=True)
    aside = None
    done = False
    try:
        with _signals_deferred():
            aside = _swap(target, staging, before)
            done = True
        removed = _prune(target, keep, tuple(protect)) if keep is not None else ()
    except KeyboardInterrupt:
        if not done:
            raise
        where = ("" if aside is None else f"; the previous runtime is at {aside}" if os.path.lexists(aside)
                 else f"; the previous runtime was being removed (--keep {keep}): the next build finishes that")
        raise AssembleError(f"interrupted after the swap: the new runtime is in place{where}", where=str(out),
                            code=130) from None
    for p in removed:
        ui.info(f"removed {'the previous runtime' if p == aside else 'an older moved-aside runtime'} "
                f"beyond --keep {keep}: {p}")
    if aside and aside not in removed:
        ui.info(f"previous runtime moved aside to {aside}")
    return Swapped(aside, removed)


def _swap(target: Target, staging: Staging, before: str) -> Path | None:
    out = target.path
    if before != "runtime":
        try:
            os.rename(staging.path, out)     # atomic; onto nothing or an empty folder, never a full one
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            existing(out, during=True)       # names what appeared there
            raise
        _save(target, _load(target).without(staging.path))
        locks.unmark(out)
        return None
    aside, old = _aside_name(out), locks.identity(out)
    assert old is not None, "a swap replaces a runtime that is there"
    ledger = _load(target)
    _save(target, locks.Ledger(ledger.place, ledger.entries, {"staging": str(staging.path), "aside": str(aside),
                                                            "new": list(staging.ident), "old": list(old)}))
    try:
        if _exchange(staging.path, out):
            _rename_noreplace(staging.path, aside)   # the staging name now holds the previous runtime
        else:
            _rename_noreplace(out, aside)
            _rename_noreplace(staging.path, out)
    except Exception as exc:
        # Not a signal (those are held): an error mid-way. Finish or undo it now, so what is said is true.
        with contextlib.suppress(Exception):
            _save(target, _recover_swap(target, _load(target)))
        if locks.identity(out) != staging.ident:
            raise                            # the previous runtime is at the output again: untouched
        held = next((p for p in (aside, staging.path) if locks.identity(p) == old), None)
        if held != aside:
            raise BuildFailed(f"the new runtime is in place, but the swap did not finish ({exc}); the previous "
                              f"runtime is at {held}", where=str(out), fix="rename it yourself if you need it") from exc
        if not isinstance(exc, OSError):
            raise                            # a bug, though the swap is whole
        # the recovery finished the swap: carry on as if nothing happened
    now = _load(target).without(staging.path).plus(locks.Entry("aside", str(aside), *old, pid=os.getpid(),
                                                             time=time.time()))
    _save(target, locks.Ledger(now.place, now.entries))   # and the journal is done with
    locks.unmark(out)
    return aside


def _prune(target: Target, keep: int, protect: tuple[tuple[str, Path], ...] = ()) -> tuple[Path, ...]:
    """Only on request (--keep N): delete the moved-aside runtimes beyond the newest N that the
    ledger says this tool moved aside, that still are that folder and still match their manifest,
    and that are not, hold nothing of, and do not lie inside what this run reads (`protect`).
    Each is renamed (and recorded) before it is deleted, so a half-deleted one is never taken for
    a runtime and the next run finishes it."""
    ledger = _load(target)
    asides = sorted((e for e in ledger.entries if e.kind == "aside" and e.holds()), key=lambda e: e.time,
                    reverse=True)
    removed = []
    for e in asides[keep:]:
        p = Path(e.path)
        if why := next((w for words, q in protect if (w := _reads(p, words, Path(os.path.realpath(q))))), None):
            ui.info(f"kept {p}: {why} of this run")
            continue
        try:
            whole = existing(p) == "runtime"
        except AssembleError:
            whole = False
        if not whole:
            ui.warn(f"kept {p}: it no longer holds exactly the runtime assemble moved there")
            continue
        doomed = p.parent / f"{target.path.name}{DELETING_TAG}{os.getpid()}-{secrets.token_hex(3)}"
        with _signals_deferred():
            _save(target, _load(target).without(e.path).plus(
                locks.Entry("deleting", str(doomed), e.dev, e.ino, os.getpid(), time.time(), was=e.path,
                            mark=locks.mark(p))))
            _rename_noreplace(p, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        if not os.path.lexists(doomed):
            _save(target, _load(target).without(doomed))
        removed.append(p)
    return tuple(removed)


def _reads(p: Path, words: str, q: Path) -> str | None:
    """How folder p meets q, a path the run reads (words: what q is), or None."""
    return (f"it is {words}" if p == q else f"it holds {words} ({q})" if _inside(q, p)
            else f"it lies inside {words} ({q})" if _inside(p, q) else None)


def publish(target: Target, fill: Callable[[Path], None], *, wait: bool = True, keep: int | None = None,
            protect: Iterable[tuple[str, Path]] = ()) -> None:
    """Lock the output, fill a fresh staging folder beside it (`fill(path)`; raising abandons it, the
    old output untouched), then swap it in. `protect`: (words, path) the run reads; --keep never
    deletes them."""
    with locked(target, wait=wait):
        clear_leftovers(target)
        with staged(target) as staging:
            fill(staging.path)
            swap_in(target, staging, keep=keep, protect=protect)


def publish_runtime(out: Path, fill: Callable[[Path, Path], None], *, scratch: str,
                    reads: Sequence[tuple[str, Path]] = (), source: Path | None = None, wait: bool = True,
                    keep: int | None = None, check: Callable[[Path], Report] | None = None,
                    checked: str = "the new runtime", preview: Callable[[Path], None] | None = None,
                    scoped_tmp: bool = False) -> Path | None:
    """The one way a flow makes a runtime folder. --out is checked first (reads only, well under a
    second: a folder this tool did not make is refused before anything is fetched, unpacked or
    compiled); `reads`: (words, path) of what the run reads besides the --source tree `source`: the
    output may be none of them, and --keep never deletes one. Then a scratch folder for the run
    (`scratch`: its prefix; under the cache, so a killed run leaves nothing in /tmp, and with
    `scoped_tmp` also this process's and its tools' TMPDIR), `fill(staged, scratch)` into a staging
    folder beside --out, `check(staged)` must pass (else nothing is swapped in), swap in.
    --dry-run gives `preview`: it is shown the scratch folder, nothing is checked or written, None."""
    if preview is not None:
        with paths.scratch(scratch) as work:
            preview(work)
        return None
    target = check_destination(out, cache=paths.cache_dir(), source=source, inputs=reads)

    def fill_and_check(staged: Path) -> None:
        fill(staged, work)
        if check is not None:
            from builder.check.verify import require_passed   # the checks load only when a runtime is made
            require_passed(check(staged), str(target.path), checked)

    protect = [*reads, *([("the --source tree", source)] if source else [])]
    with paths.scratch(scratch) as work, (scoped_tempdir(work) if scoped_tmp else contextlib.nullcontext()):
        publish(target, fill_and_check, wait=wait, keep=keep, protect=protect)
    ui.step(ui.ok(f"runtime ready: {target.path}"))
    return target.path


@contextlib.contextmanager
def scoped_tempdir(folder: Path) -> Iterator[None]:
    """The temporary folder of this process (tempfile) and of the tools it runs (TMPDIR: a compiler
    killed with us leaves its files there too) for the duration of the run."""
    old, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = old
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
