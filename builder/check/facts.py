"""Every fact manifest.json states about a runtime's files, recomputed from the files.

The hashes prove the bytes of each listed file; this check proves what the manifest *says* about
them, with the functions build and repair wrote it with (one home for each fact):

  files[].role         where the layout puts each file (layout_role: bin/ own, tests/ test, a folder
                       under lib/ data, licenses/ license, lib/ own for llama.cpp's names, else vendor)
  glibc_min,           the newest GLIBC_ / GLIBCXX_ version any ELF file needs (elf.highest_need) and
  glibcxx_min,         the file in bin/ or lib/ needing it (elf.folder_need)
  glibc_floor.needed_by
  symlinks (SONAMEs)   each library in lib/ is reached by its DT_SONAME; a NEEDED name lib/ answers is
                       the SONAME of the file it leads to (builder.check.libfacts)
  system_libs          exactly the NEEDED names the runtime does not carry, who needs each, and the
                       bundling policy's reason (policy.classify)
  gpu_targets,         the archs bin/libggml-hip.so carries (static.hip_archs), the CUDA code objects of
  gpu_runtimes         bin/libggml-cuda*.so (cudacode) and gpuruntime.describe again (builder.check.codefacts)
  CPU modules          every bin/libggml-cpu-*.so is a level ggml builds; a single-level module's GGML_<ISA>
                       defines are what its code reports (builder.check.codefacts)
  loader               backend_dirs as prebuilt.loader.loader_facts reads them; accepted_risk only where
                       the loader carries a risk to accept
  llama_cpp.sha        the commit libggml-base was built from (builder.check.ggmlcommit)
  inputs               only a repair's; their ggml base as prebuilt.identity describes the carried one;
                       together, the backends of bin/'s modules
  recipe.targets,      the programs in bin/; names the build's environment policy passes
  units[].environment, (builder.units.environment); each role's bytes; programs executable
  size_by_role, modes

What the files cannot say (cmake lines, where inputs came from, the recipe's promise) is covered by
the provenance statement (manifest.json's digest is one of its subjects) or is informational and
read by no decision: the table in docs/reference/runtime.md. Each mismatch is one line naming the
field and the file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

from elftools.common.exceptions import ELFError

from builder.check import codefacts, libfacts
from builder.check.integrity import Finding
from builder.check.ggmlcommit import built_from
from builder.errors import AssembleError
from builder.prebuilt import identity
from builder.prebuilt.discover import BASE_PREFIX, OWN_LIBRARY
from builder.prebuilt.loader import loader_facts
from builder.runtime.layout import BACKEND_OPS, BIN_DIR, LIB_DIR, LICENSES_DIR, TESTS_DIR, module_backend
from builder.runtime.manifest import ROLES, Manifest
from builder.units.environment import KEYED, PASSED, PASSED_PREFIXES, why_scrubbed

NAME = "manifest facts"
HINT = ("the manifest states what its files do not: rebuild or repair again (never edit manifest.json); "
        "each field and how verify reads it: docs/reference/runtime.md")
PREBUILT = "prebuilt"                 # llama_cpp.source.kind of a repaired runtime (flows.platforms)


def layout_role(rel: str) -> str | None:
    """The role the layout gives a file at this runtime path (None: no role puts a file there).
    lib/ holds llama.cpp's libraries (own, by the names repair takes as llama.cpp's) and vendor
    libraries; a vendor data folder is a folder under lib/ (bundle: lib/<where the library reads>)."""
    parts = rel.split("/")
    if parts[0] == LICENSES_DIR and len(parts) >= 2:
        return "license"
    if len(parts) == 2 and parts[0] in (BIN_DIR, TESTS_DIR):
        return "own" if parts[0] == BIN_DIR else "test"
    if parts[0] == LIB_DIR and len(parts) > 2:
        return "data"
    if parts[0] == LIB_DIR and len(parts) == 2:
        return "own" if OWN_LIBRARY.match(parts[1]) else "vendor"
    return None


def finding(runtime: Path, m: Manifest, recipe: object = None) -> Finding:
    """The manifest's facts against the files (recipe: the one build verifies with, whose [bundle]
    rules the system libraries' reasons then must match exactly)."""
    runtime = Path(runtime)
    if m.platform != "linux":
        problems = _guarded("loader", lambda: _loader(runtime, m, windows=True))
        return Finding(NAME, tuple(problems), "loader: as the files say", HINT, limit=4)
    try:
        files = libfacts.read(runtime, m)
    except OSError as exc:
        return Finding(NAME, (f"not compared: the runtime's folders could not be read ({exc.strerror or exc})",),
                       "", HINT)
    families: list[tuple[str, Callable[[], list[str]]]] = [
        ("files[].role", lambda: _roles(m)),
        ("glibc, SONAMEs, system_libs", lambda: libfacts.problems(files, m, recipe)),
        ("gpu_targets, gpu_runtimes, CPU modules", lambda: codefacts.problems(files, m)),
        ("loader", lambda: _loader(runtime, m)),
        ("llama_cpp.sha, inputs", lambda: _identity(runtime, m)),
        ("recipe.targets, units, size_by_role", lambda: _record(files, m))]
    problems = [_one_line(p) for name, family in families for p in _guarded(name, family)]
    return Finding(NAME, tuple(problems), f"{', '.join(n for n, _ in families)}: as the files say", HINT, limit=4)


def _one_line(text: str) -> str:
    """A name read from a file or a folder may hold any character: each problem stays one printable line."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _guarded(name: str, family: Callable[[], list[str]]) -> list[str]:
    """A family's problems; a file it cannot read (damaged: the hashes or the ELF checks name it) is one
    line, never an internal error, and leaves the other families to run."""
    try:
        return family()
    except (OSError, ValueError, AssembleError, ELFError, struct.error) as exc:
        return [(f"{name}: not compared, a file could not be read ({type(exc).__name__}: "
                f"{getattr(exc, 'what', None) or exc})")]


# --- roles ------------------------------------------------------------------------------------

_WHY = {("own", BIN_DIR): f"{BIN_DIR}/ holds llama.cpp's programs and backend modules",
        ("test", TESTS_DIR): f"{TESTS_DIR}/ holds test programs",
        ("data", LIB_DIR): f"a folder under {LIB_DIR}/ is a vendor library's data",
        ("license", LICENSES_DIR): f"{LICENSES_DIR}/ holds licence texts",
        ("own", LIB_DIR): "a llama.cpp library by its name",
        ("vendor", LIB_DIR): "not a llama.cpp library by its name"}


def _roles(m: Manifest) -> list[str]:
    out = []
    for i, f in enumerate(m.files):
        want = layout_role(f.path)
        if want is None:
            out.append(f"files[{i}].path: {f.path} lies outside bin/, lib/, tests/ and licenses/, where no "
                       "role puts a file")
        elif f.role != want:
            out.append(f"files[{i}].role of {f.path} is {f.role}, but it is {want} ({_WHY[want, f.path.split('/')[0]]})")
    return out


# --- loader --------------------------------------------------------------------------------

def _libggml(runtime: Path) -> Path | None:
    """lib/libggml.so*: the file the loader is in (as check.prebuiltloader finds it)."""
    lib = runtime / LIB_DIR
    found = sorted(p for p in lib.glob("libggml.so*") if p.is_file() and not p.is_symlink()) if lib.is_dir() else []
    return found[0] if found else None


def _loader(runtime: Path, m: Manifest, windows: bool = False) -> list[str]:
    """The loader record is a repair's (a prebuilt ggml cannot be patched): its compiled-in folders are
    read from libggml again; the risk accepted is the user's word, which no file can show (the
    provenance covers it, and verify shows it on the check it turns from FAIL to WARN)."""
    if m.loader is None:
        recorded: tuple[str, ...] = ()
    elif m.llama_cpp.source.kind != PREBUILT:
        return [(f"loader: recorded, but llama_cpp.source.kind is {m.llama_cpp.source.kind}: only assemble repair "
                "records the loader of a prebuilt ggml (a build's carries the backend-loader-no-cwd patch)")]
    else:
        recorded = m.loader.backend_dirs
    libggml = None if windows else _libggml(runtime)
    if libggml is None:
        return [f"loader.backend_dirs: {', '.join(recorded)}, but the runtime carries no lib/libggml.so*"] \
            if recorded else []
    found = loader_facts(libggml, recorded).backend_dirs
    if set(found) != set(recorded):
        return [(f"loader.backend_dirs: {', '.join(recorded) or 'none'}, but {LIB_DIR}/{libggml.name} searches "
                f"{', '.join(found) or 'no compiled-in folder'}")]
    return []


# --- llama.cpp's identity and the inputs ------------------------------------------------------

def _base(runtime: Path, m: Manifest) -> Path | None:
    """lib/libggml-base.so*: the ggml base (llama.cpp's own; one per runtime)."""
    lib = runtime / LIB_DIR
    found = sorted(p for p in lib.glob(BASE_PREFIX + "*") if p.is_file() and not p.is_symlink()) if lib.is_dir() else []
    return next((p for p in found if m.role_of(f"{LIB_DIR}/{p.name}") == "own"), found[0] if found else None)


def _identity(runtime: Path, m: Manifest) -> list[str]:
    out = []
    base = _base(runtime, m)
    rel = f"{LIB_DIR}/{base.name}" if base else ""
    sha = m.llama_cpp.sha
    if base is not None and sha and (commit := built_from(base)) and not sha.startswith(commit):
        out.append(f"llama_cpp.sha: {sha}, but {rel} was built from commit {commit} (its ggml_commit())")
    prebuilt = m.llama_cpp.source.kind == PREBUILT
    if m.inputs and not prebuilt:
        out.append(f"inputs: {len(m.inputs)} recorded, but llama_cpp.source.kind is {m.llama_cpp.source.kind}: "
                   "only assemble repair takes inputs")
    if not m.inputs:
        return out
    backends = {b for p in (runtime / BIN_DIR).glob("libggml-*.so") if (b := module_backend(p.name))} \
        if (runtime / BIN_DIR).is_dir() else set()
    given = {b for x in m.inputs for b in x.contributed}
    if given != backends:
        out.append(f"inputs[].contributed: {', '.join(sorted(given)) or 'none'}, but bin/ holds modules of "
                   f"{', '.join(sorted(backends)) or 'none'}")
    for i, x in enumerate(m.inputs):
        if base is None or not x.base.startswith("ggml "):
            continue                  # backend modules only: no base of its own
        carried = identity.base_identity(base, x.build)
        if x.base != carried.describe():
            out.append(f"inputs[{i}].base: {x.base!r}, but {rel} is {carried.describe()!r}")
        if x.version is not None and x.version != carried.version:
            out.append(f"inputs[{i}].version: {x.version}, but the carried base is {rel}")
    return out


# --- what the build recorded of itself --------------------------------------------------------

def _record(files: libfacts.Files, m: Manifest) -> list[str]:
    out = []
    programs = {name for rel, info in files.elf.items() if rel.startswith(BIN_DIR + "/") and info.is_program
                and module_backend(name := Path(rel).name) is None}
    stated = set(m.recipe.targets) - {BACKEND_OPS}
    if stated != programs:
        out.append(f"recipe.targets: {', '.join(sorted(stated)) or 'none'}, but the programs in bin/ are "
                   f"{', '.join(sorted(programs)) or 'none'}")
    for i, u in enumerate(m.units):
        out += _environment(u.environment or {}, f"units[{i}].environment")
    if m.size_by_role:
        sums = {r: sum(f.size for f in m.files if f.role == r) for r in ROLES}
        for role in ROLES:
            if m.size_by_role.get(role, 0 if not sums[role] else None) != sums[role]:
                out.append(f"size_by_role.{role}: {m.size_by_role.get(role)}, but its files hold {sums[role]} bytes")
    return out


def _environment(env: dict[str, object], key: str) -> list[str]:
    """What the build records of the caller's environment, against what its policy can have passed:
    a name it never passes (LD_PRELOAD) was not passed."""
    out = []
    passed = [str(n) for n in _listed(env.get("passed"))]
    keyed = [str(n) for n in _listed(env.get("keyed"))]
    scrubbed = [str(n) for n in _listed(env.get("scrubbed"))]
    for name in passed:
        if not (name in PASSED or name in KEYED or name.startswith(PASSED_PREFIXES)):
            out.append(f"{key}.passed: {name[:40]!r}, a name the build's environment policy never passes")
    for name in keyed:
        if name not in KEYED or name not in passed:
            out.append(f"{key}.keyed: {name[:40]!r}, not a passed name that is part of the build key "
                       f"({', '.join(KEYED)})")
    for name in scrubbed:
        if name in KEYED or why_scrubbed(name) is None:
            out.append(f"{key}.scrubbed: {name[:40]!r}, a name the build's environment policy does not scrub")
    return out


def _listed(value: object) -> list[object]:
    """The names of a list, or of a map's keys (the reader checked the types of a manifest it read)."""
    return list(value) if isinstance(value, (list, dict)) else []
