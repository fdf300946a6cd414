"""The file-level truth of a runtime folder: is it what its manifest says, and did a copy, a chmod
or a planted file turn it into something else? Reads the folder only (lstat, readlink, sha256);
runs nothing, follows no link out of the runtime.

  manifest            manifest.json is there, a regular file, and valid (Manifest.load)
  manifest hashes     every listed file and link is there and unchanged; nothing was added (but
                      verify --ops' record); tests/ may be absent as a whole, never in part
  file modes          executables in bin/ still executable; no setuid/setgid/sticky bit; nothing
                      world-writable (files and folders, the runtime folder included)
  symlinks            no link, listed or not, leaves the runtime or names an absolute target
  module <backend>    each listed backend has its libggml-<backend>*.so in bin/
  unlisted modules    no module in bin/ for a backend the runtime does not list (ggml loads it)

`checks()` is verify's view; `problems()` the same findings as lines, for `package`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from builder.check.report import FAIL, PASS, SKIP, Check
from builder.config.recipe import BACKENDS
from builder.runtime.layout import BIN_DIR, TESTS_DIR, in_tests, module_backend
from builder.runtime.manifest import NAME, Manifest, ManifestInvalid, check_files, tests_left_out

_SPECIAL = ((stat.S_ISUID, "setuid"), (stat.S_ISGID, "setgid"), (stat.S_ISVTX, "sticky"))


@dataclass(frozen=True)
class Entry:
    """One thing in the runtime folder, as lstat saw it."""
    rel: str            # relative path; "." for the runtime folder itself
    mode: int           # st_mode (type and permission bits)


@dataclass(frozen=True)
class Finding:
    """One check's problems in full (a Check shows the first few; package names them all)."""
    name: str
    problems: tuple[str, ...]
    ok: str             # the pass line
    hint: str
    not_run: str = ""   # why it could not run (then problems is empty)
    limit: int = 4

    def check(self) -> Check:
        if self.not_run:
            return Check(self.name, SKIP, f"not run: {self.not_run}")
        if not self.problems:
            return Check(self.name, PASS, self.ok)
        more = f" (+{len(self.problems) - self.limit} more)" if len(self.problems) > self.limit else ""
        return Check(self.name, FAIL, "; ".join(self.problems[:self.limit]) + more, self.hint)


def load(runtime: Path) -> tuple[Manifest | None, ManifestInvalid | None]:
    try:
        return Manifest.load(runtime), None
    except ManifestInvalid as exc:
        return None, exc


def findings(runtime: Path, m: Manifest | None, invalid: ManifestInvalid | None, backends: tuple[str, ...],
             listed: tuple[str, ...] | None) -> list[Finding]:
    """backends: those whose modules must be in bin/; listed: every backend the runtime may carry
    a module for (None: no valid manifest or recipe says, so that direction is not run)."""
    runtime = Path(os.path.realpath(runtime))
    entries, unreadable = walk(runtime)
    out = [_manifest_finding(runtime, m, invalid),
           Finding("file modes", tuple(mode_problems(entries, m) + unreadable),
                   f"{len(entries)} files and folders: executables runnable, no setuid/setgid/sticky bit, "
                   "nothing world-writable",
                   "restore the modes the build set (chmod a+x on bin/ executables; chmod ug-s,-t,o-w on the "
                   "rest), or copy the runtime again keeping its modes (cp -a, tar -p)"),
           Finding("symlinks", tuple(link_problems(runtime, entries)),
                   f"{sum(stat.S_ISLNK(e.mode) for e in entries)} links, all relative and inside the runtime",
                   "delete those links and copy the runtime again: a runtime's links point inside it, relative "
                   "to their folder")]
    out += [Finding(f"module {b}", tuple(missing_module(runtime, b)), _module_list(runtime, b),
                    "rebuild, or copy the whole runtime again; never move backend modules out of bin/")
            for b in backends]
    out.append(Finding("unlisted modules", tuple(unlisted_modules(runtime, m, listed)) if listed is not None else (),
                       f"every backend module in bin/ belongs to a listed backend ({', '.join(listed or ())})",
                       "delete it, or rebuild with a recipe that lists that backend",
                       not_run="" if listed is not None else "no valid manifest says which backends the runtime has"))
    return out


def checks(runtime: Path, m: Manifest | None, invalid: ManifestInvalid | None, backends: tuple[str, ...],
           listed: tuple[str, ...] | None) -> list[Check]:
    return [f.check() for f in findings(runtime, m, invalid, backends, listed)]


def problems(runtime: Path, m: Manifest | None = None) -> list[str]:
    """Every integrity failure, one line each."""
    invalid = None
    if m is None:
        m, invalid = load(runtime)
    backends = m.recipe.backends if m else ()
    return [p for f in findings(runtime, m, invalid, backends, backends if m else None) for p in f.problems]


# --- manifest ------------------------------------------------------------------------

def _manifest_finding(runtime: Path, m: Manifest | None, invalid: ManifestInvalid | None) -> Finding:
    hint = "rebuild the runtime with assemble build; a runtime without a valid manifest cannot be verified"
    if m is None:
        return Finding("manifest", (invalid.what if invalid else f"{NAME} is missing",), "", hint)
    try:
        found = check_files(runtime, m)
    except (OSError, ValueError) as exc:      # an unreadable file, a name the file system cannot hold
        found = [f"cannot read the runtime against its manifest ({getattr(exc, 'strerror', None) or exc})"]
    absent = tests_left_out(runtime, m)
    checked = [f for f in m.files if not (absent and in_tests(f.path))]
    return Finding("manifest hashes", tuple(found), f"{len(checked)} files match their sha256"
                   + (f" ({TESTS_DIR}/ left out as a whole: a runtime packaged without its tests)" if absent else ""),
                   "a file was changed, removed or added after the build: rebuild, or copy the whole runtime "
                   "again", limit=3)


# --- the folder as lstat sees it -------------------------------------------------------

def walk(runtime: Path) -> tuple[list[Entry], list[str]]:
    """Everything under the runtime, never following a link; folders that could not be read."""
    unreadable: list[str] = []

    def note(exc: OSError) -> None:
        rel = Path(exc.filename).relative_to(runtime).as_posix() if exc.filename else "?"
        unreadable.append(f"{rel}/: unreadable ({exc.strerror or exc})")

    entries = [Entry(".", os.stat(runtime).st_mode)]
    for dirpath, dirs, names in os.walk(runtime, onerror=note):     # never descends into a linked folder
        base = Path(dirpath)
        for name in sorted(dirs + names):
            p = base / name
            try:
                entries.append(Entry(p.relative_to(runtime).as_posix(), os.lstat(p).st_mode))
            except OSError as exc:
                unreadable.append(f"{p.relative_to(runtime).as_posix()}: unreadable ({exc.strerror or exc})")
    return entries, unreadable


def _shown(e: Entry) -> str:
    if e.rel == ".":
        return "the runtime folder"
    return e.rel + "/" if stat.S_ISDIR(e.mode) else e.rel


def mode_problems(entries: list[Entry], m: Manifest | None) -> list[str]:
    out = []
    must_run = _executables(m)
    for e in entries:
        if stat.S_ISLNK(e.mode):
            continue                  # a link's own mode is always 0777 and never used
        bits = stat.S_IMODE(e.mode)
        if e.rel in must_run and stat.S_ISREG(e.mode) and not bits & stat.S_IXUSR:
            out.append(f"{e.rel} is not executable (mode {bits:04o}, built {must_run[e.rel]:04o}): it cannot be started")
        # setgid on a folder is left alone: it is inherited from a group-shared parent folder
        # (cp into /srv/shared) and changes only the group of new files, never who code runs as
        special = [word for bit, word in _SPECIAL if bits & bit and not (stat.S_ISDIR(e.mode) and bit == stat.S_ISGID)]
        if special:
            out.append(f"{_shown(e)} has the {'/'.join(special)} bit (mode {bits:04o}): a runtime never needs it")
        if bits & stat.S_IWOTH:
            out.append(f"{_shown(e)} is world-writable (mode {bits:04o}): any user of the host could replace "
                       "what the runtime runs")
    return out


def _executables(m: Manifest | None) -> dict[str, int]:
    """Path -> mode as built, for our programs in bin/ and tests/ (modules are dlopen()ed: they need no
    x bit)."""
    if m is None:
        return {f"{BIN_DIR}/llama-server": 0o755}
    return {f.path: f.mode for f in m.files if f.mode & stat.S_IXUSR and (
        f.role == "test" or (f.role == "own" and f.path.startswith(BIN_DIR + "/")
                             and module_backend(Path(f.path).name) is None))}


def link_problems(runtime: Path, entries: list[Entry]) -> list[str]:
    root = os.path.realpath(runtime)
    out = []
    for e in entries:
        if not stat.S_ISLNK(e.mode):
            continue
        p = Path(runtime) / e.rel
        target = os.readlink(p)
        if os.path.isabs(target):
            out.append(f"{e.rel} -> {target}: an absolute target (outside the runtime, or lost when it moves)")
            continue
        real = os.path.realpath(p)    # through every link on the way, as a reader would
        if not (real == root or real.startswith(root + os.sep)):
            out.append(f"{e.rel} -> {target}: leads outside the runtime")
    return out


# --- backend modules --------------------------------------------------------------------

def modules_in_bin(runtime: Path) -> list[tuple[Path, str]]:
    """(file, backend) for every backend module ggml's loader would find in bin/."""
    bindir = Path(runtime) / BIN_DIR
    if not bindir.is_dir():
        return []
    return [(p, b) for p in sorted(bindir.iterdir()) if (b := module_backend(p.name)) and p.is_file()]


def _module_list(runtime: Path, backend: str) -> str:
    return ", ".join(f"{BIN_DIR}/{p.name}" for p, b in modules_in_bin(runtime) if b == backend)


def missing_module(runtime: Path, backend: str) -> list[str]:
    if any(b == backend for _, b in modules_in_bin(runtime)):
        return []
    elsewhere = sorted(p.relative_to(runtime).as_posix() for p in Path(runtime).rglob(f"libggml-{backend}*.so")
                       if p.parent != Path(runtime) / BIN_DIR)
    where = f"; found {', '.join(elsewhere)}, where it is never looked for" if elsewhere else ""
    return [(f"no libggml-{backend}*.so in {BIN_DIR}/ (ggml's loader looks next to the executable){where}: its "
             "devices would silently vanish")]


def unlisted_modules(runtime: Path, m: Manifest | None, listed: tuple[str, ...]) -> list[str]:
    """ggml's loader tries every backend it knows in bin/: a module there for a backend the runtime
    does not list still runs inside llama-server. A backend no recipe can list (rpc, blas: a -D
    define) is fine when the manifest records the module as built by us."""
    out = []
    for p, backend in modules_in_bin(runtime):
        rel = f"{BIN_DIR}/{p.name}"
        if backend in listed or (backend not in BACKENDS and m is not None and m.role_of(rel) == "own"):
            continue
        out.append(f"{rel} is a {backend} backend module, but the runtime lists {', '.join(listed) or 'none'}: "
                   "ggml's loader would load it into llama-server")
    return out

