"""manifest.json: what a runtime is made of, and proof that it is still intact.

`Manifest` is the one typed form every reader uses (verify, package, sbom, image,
the device checks, the output-folder ownership proof). `from_json` validates types,
required keys and every path (relative, normalised, inside the runtime, no symlink
escaping it) before anyone trusts a field; `to_json` is deterministic. Paths are
relative to the runtime folder, so a moved runtime keeps a valid manifest.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, overload

from builder import __version__
from builder.config import glibc
from builder.config.recipe import NAME_RE, SHA_RE
from builder.config.upstream import BUILD_RE
from builder.digest import sha256_file
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError, BuildFailed
from builder.runtime.gpuruntime import CudaModuleCode, CudaRuntimeRecord, GpuRuntimes, RocmRecord
from builder.runtime.layout import OPS_RECORD, TESTS_DIR, in_tests

NAME = "manifest.json"
SCHEMA = 2
READABLE = (1, 2)           # schema 1 (before the resolved config was recorded) reads the same
# license: a licence text under licenses/ (runtime.licenses); test: a test program under tests/, which a
# runtime may carry or leave out as a whole (check_files)
ROLES = ("own", "vendor", "data", "license", "test")
BUILT = ("own", "test")      # the roles of files built from llama.cpp (its licence covers them)
PLATFORMS = ("linux", "windows")   # linux: bin/ + lib/ with RPATHs; windows: one flat DLL folder (builder.windows)
CREATOR = "assemble"
# The keys of units[].environment: builder.units.environment.BuildEnv.as_dict (tests/unit/runtime/test_manifest.py
# holds the two together; this layer cannot import that one).
ENVIRONMENT_KEYS = ("passed", "keyed", "scrubbed")


class ManifestInvalid(BuildFailed):
    """manifest.json is missing, unreadable or not this tool's: the runtime cannot be trusted (exit 1)."""


# --- the parts -----------------------------------------------------------------------

@dataclass(frozen=True)
class FileEntry:
    path: str          # relative to the runtime
    role: str          # one of ROLES
    origin: str        # where it was copied from
    sha256: str
    size: int
    mode: int          # permission bits as built, e.g. 0o755


@dataclass(frozen=True)
class LinkEntry:
    path: str
    target: str        # relative to the link's folder, never leaving the runtime


@dataclass(frozen=True)
class SystemLib:
    soname: str
    reason: str
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class PatchRecord:
    name: str
    file: str
    sha256: str
    fixes: str


@dataclass(frozen=True)
class RecipeRecord:
    name: str
    description: str
    backends: tuple[str, ...]
    targets: tuple[str, ...]
    file: str


@dataclass(frozen=True)
class Provenance:
    """How the llama.cpp tree was obtained and what proved it (builder.source.fetch writes it)."""
    kind: str                         # git | sdist | local
    verified_by: str = ""
    url: str | None = None            # git
    package: str | None = None        # sdist
    version: str | None = None
    sha256: str | None = None
    subdir: str | None = None
    path: str | None = None           # local
    dirty: bool | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        return _provenance(_Reader("llama_cpp.source"), d)


@dataclass(frozen=True)
class SourceRecord:
    sha: str | None
    commit_time: int | None
    source: Provenance
    features: dict[str, Any]                    # feature name -> evidence
    patches: tuple[PatchRecord, ...]
    build: str | None = None          # upstream's build number for sha ("b7416", "b7416+3"; config.upstream)


@dataclass(frozen=True)
class GpuTargets:
    cuda: tuple[str, ...] = ()
    hip: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolUse:
    """One tool a unit was built with, as the SBOM names it."""
    name: str
    version: str
    path: str


@dataclass(frozen=True)
class UnitRecord:
    name: str
    backends: tuple[str, ...]
    container: str | None
    cuda_policy: dict[str, Any] | None
    hip_policy: dict[str, Any] | None
    built_elsewhere: dict[str, Any] | None
    build_dir: str
    configure: tuple[str, ...]
    build: tuple[str, ...]
    defines: dict[str, Any]
    toolchain: dict[str, Any]                   # tool -> what was found (free-form detail, read through tools())
    environment: dict[str, Any] | None = None   # what the build saw of the caller's environment (builder.units.environment)
    cache: dict[str, Any] | None = None         # what its compiles found in the compiler cache (builder.units.cachestats)

    def toolkit_roots(self) -> dict[str, tuple[str, str]]:
        """GPU toolkit -> (root folder, version), for naming where a vendor file came from."""
        out = {}
        for key, root_key in (("cuda", "root"), ("rocm", "path")):
            tool = self.toolchain.get(key)
            if isinstance(tool, dict) and tool.get(root_key):
                out[key] = (str(tool[root_key]), str(tool.get("version") or ""))
        return out

    def tools(self) -> tuple[ToolUse, ...]:
        out = []
        for key, tool in sorted(self.toolchain.items()):
            if isinstance(tool, dict):
                path = next((str(tool[k]) for k in ("path", "nvcc", "hip_clang", "root") if tool.get(k)), "")
                out.append(ToolUse(key, str(tool.get("version") or ""), path))
            elif isinstance(tool, str):
                out.append(ToolUse(key, "", tool))
        return tuple(out)


@dataclass(frozen=True)
class InputRecord:
    """One prebuilt input `assemble repair` made the runtime from."""
    given: str                        # as the user named it
    kind: str                         # folder | archive | debs
    sha256: str | None                # of the archive, or of the .deb set
    version: str | None               # ggml version of its base (libggml-base.so.<version>)
    build: str | None                 # upstream build tag / commit when the input says (b7416, 0c1e570)
    base: str                         # its ggml base, described (version, exported interface)
    contributed: tuple[str, ...]      # the backends taken from it


@dataclass(frozen=True)
class LeftOutRecord:
    """A file of a prebuilt input that is llama.cpp's and was not carried (assemble repair)."""
    path: str                         # as the user knows it: the input given, then the member path
    reason: str                       # why, one line ("--without" when the user said so)


@dataclass(frozen=True)
class LoaderRecord:
    """What the prebuilt ggml loader searches besides the runtime (builder.prebuilt.loader)."""
    backend_dirs: tuple[str, ...]     # compiled-in GGML_BACKEND_DIR
    accepted_risk: str | None = None  # --accept-loader-risk REASON: the user's, recorded


@dataclass(frozen=True)
class GlibcFloor:
    """The glibc a Linux runtime promises to start on (builder.config.glibc), and which file needs
    the newest GLIBC_ version (glibc_min, the version itself)."""
    promised: str | None              # None: nothing promised (a repaired runtime)
    stated_by: str | None             # recipe | build host
    needed_by: str | None             # e.g. "bin/llama-server"; None when no file needs a GLIBC_ version


@dataclass(frozen=True)
class LicenseRecord:
    """The licence of one component the runtime carries, and the files it covers (runtime.licenses)."""
    component: str                    # llama.cpp, a Debian package, a wheel: licenses/<component>/
    spdx: str | None                  # SPDX expression when known (MIT, LicenseRef-..., ... WITH GCC-exception-3.1)
    texts: tuple[str, ...]            # its licence files in the runtime (role license)
    covers: tuple[str, ...]           # the carried files under it
    source: str = ""                  # where the texts came from


@dataclass(frozen=True)
class Manifest:
    recipe: RecipeRecord
    llama_cpp: SourceRecord
    files: tuple[FileEntry, ...]
    symlinks: tuple[LinkEntry, ...] = ()
    gpu_targets: GpuTargets = field(default_factory=GpuTargets)
    units: tuple[UnitRecord, ...] = ()
    system_libs: tuple[SystemLib, ...] = ()
    glibc_min: str | None = None
    glibcxx_min: str | None = None
    glibc_floor: GlibcFloor | None = None  # absent in runtimes built before the floor was recorded
    size_by_role: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] | None = None        # the resolved build configuration (builder.config.options)
    gpu_runtimes: GpuRuntimes = field(default_factory=GpuRuntimes)   # what the GPU code needs of a host
    inputs: tuple[InputRecord, ...] = ()   # assemble repair: the prebuilt inputs
    left_out: tuple[LeftOutRecord, ...] = ()   # assemble repair: what of them was not carried, and why
    loader: LoaderRecord | None = None     # assemble repair: the prebuilt loader's own search folders
    platform: str = "linux"                # what the runtime runs on (PLATFORMS)
    licenses: tuple[LicenseRecord, ...] = ()   # every carried file's licence, texts under licenses/
    schema: int = SCHEMA
    created_by: str = f"{CREATOR} {__version__}"

    # -- reading ------------------------------------------------------------------

    @classmethod
    def from_json(cls, text: str | bytes, where: str = NAME) -> Manifest:
        """Parse and validate; ManifestInvalid (one line, naming the key) on anything wrong."""
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise _invalid(where, "", f"not valid JSON ({type(exc).__name__})") from None
        return _parse(raw, where)

    @classmethod
    def load(cls, runtime: Path) -> Manifest:
        """The manifest of a runtime folder. A manifest.json that is a symlink is refused: it could
        vouch for files it does not describe."""
        path = Path(runtime) / NAME
        if path.is_symlink():
            raise _invalid(str(path), "", "is a symlink, not the file the build wrote")
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            raise _invalid(str(path), "", "missing: not a runtime folder made by assemble build") from None
        except OSError as exc:
            raise _invalid(str(path), "", f"unreadable ({exc.strerror or exc})") from None
        return cls.from_json(text, str(path))

    # -- writing ------------------------------------------------------------------

    def to_json(self) -> str:
        body = _plain(self)
        head = {"schema": body.pop("schema"), "created_by": body.pop("created_by")}   # first, for a reader's eye
        return json.dumps({**head, **body}, indent=2) + "\n"

    def write(self, runtime: Path) -> Path:
        path = Path(runtime) / NAME
        tmp = path.with_name(NAME + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path

    # -- questions readers ask ----------------------------------------------------

    def paths(self) -> set[str]:
        return {f.path for f in self.files} | {s.path for s in self.symlinks}

    def role_of(self, path: str) -> str | None:
        return next((f.role for f in self.files if f.path == path), None)

    def unlicensed(self) -> list[str]:
        """Carried files no licence record covers (a licence text covers itself)."""
        covered = {p for rec in self.licenses for p in rec.covers}
        return [f.path for f in self.files if f.role != "license" and f.path not in covered]

    def host_sonames(self) -> set[str]:
        return {s.soname for s in self.system_libs}

    def toolkit_versions(self) -> dict[str, str]:
        """{"cuda": version, "rocm": version} of the toolkits the units were built with, as the build
        hands them to gpuruntime.describe (used where no carried library's code or name says)."""
        return {k: str(u.toolchain[k].get("version") or "") for u in self.units for k in ("cuda", "rocm")
                if isinstance(u.toolchain.get(k), dict)}


# --- the proof that a folder is still what the manifest says --------------------------

def check_files(runtime: Path, manifest: Manifest, hashes: bool = True) -> list[str]:
    """Every problem with the folder against the manifest: missing, changed, extra, wrong links,
    and anything that leads outside the runtime. hashes=False compares names, kinds and sizes only
    (enough to prove a folder is one this tool wrote, without reading gigabytes)."""
    runtime = Path(runtime)
    root = os.path.realpath(runtime)
    problems = []
    to_hash = []
    skipped = {p for p in manifest.paths() if in_tests(p)} if tests_left_out(runtime, manifest) else set()
    for rec in manifest.files:
        p = runtime / rec.path
        if rec.path in skipped:
            continue
        if not _stays_inside(root, os.path.dirname(p)):
            problems.append(f"{rec.path}: its folder leads outside the runtime")
        elif not p.is_file() or p.is_symlink():
            problems.append(f"{rec.path}: missing")
        elif p.stat().st_size != rec.size:
            problems.append(f"{rec.path}: content differs from the manifest (sha256)")
        elif hashes:
            to_hash.append(rec)
    # largest first, on every core: a ROCm runtime is two 1 GB files and a hundred small ones
    to_hash.sort(key=lambda r: -r.size)
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        digests = list(pool.map(lambda r: sha256_file(runtime / r.path), to_hash))
    problems += [f"{r.path}: content differs from the manifest (sha256)" for r, d in zip(to_hash, digests, strict=True)
                 if d != r.sha256]
    for link in manifest.symlinks:
        p = runtime / link.path
        if link.path in skipped:
            continue
        if not _stays_inside(root, os.path.dirname(p)):
            problems.append(f"{link.path}: its folder leads outside the runtime")
        elif not p.is_symlink():
            problems.append(f"{link.path}: symlink missing")
        elif os.readlink(p) != link.target:
            problems.append(f"{link.path}: points to {os.readlink(p)}, expected {link.target}")
    listed = manifest.paths()
    for dirpath, dirs, names in os.walk(runtime):      # never follows a symlinked folder
        base = Path(dirpath)
        for name in sorted(dirs + names):
            p = base / name
            rel = p.relative_to(runtime).as_posix()
            if rel == NAME or rel in listed or (name in dirs and not p.is_symlink()):
                continue
            if rel == OPS_RECORD and p.is_file() and not p.is_symlink():
                continue                  # verify --ops' record: written after the build, never listed
            problems.append(f"{rel}: not in the manifest (added after the build?)")
    return problems


def tests_left_out(runtime: Path, manifest: Manifest) -> bool:
    """A runtime without its tests/ (`package` leaves it out unless --with-tests): the manifest lists
    tests/ but the folder is absent as a whole. Then its files and links are not looked for; a tests/
    that is there is checked entry by entry like every other folder (half of it is a failure)."""
    return not os.path.lexists(Path(runtime) / TESTS_DIR) and any(in_tests(p) for p in manifest.paths())


def _stays_inside(root: str, folder: str) -> bool:
    real = os.path.realpath(folder)
    return real == root or real.startswith(root + os.sep)


def file_mode(path: Path) -> str:
    return oct(stat.S_IMODE(path.stat().st_mode))


# --- validation ------------------------------------------------------------------------

def _invalid(where: str, key: str, what: str) -> ManifestInvalid:
    return ManifestInvalid(f"manifest.json{(' key ' + key) if key else ''} {what}", where=where,
                           fix="rebuild the runtime with assemble build; never edit manifest.json by hand")


# Values other stages turn into names or compare as numbers (archive names, image tags, patches/<file>,
# the glibc floor): a manifest holding anything else was not written by assemble.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,200}")
_SYMBOL_VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){1,2}")


class _Reader:
    """Typed access to a JSON object, naming the key path in every error."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, key: str, what: str) -> ManifestInvalid:
        return _invalid(self.where, key, what)

    def obj(self, v: Any, key: str, record: type | Iterable[str] | None = None) -> dict[str, Any]:
        """An object; with `record` (a dataclass, or the key names), one holding no other key."""
        if not isinstance(v, dict):
            raise self.fail(key, f"must be an object, not {type(v).__name__}")
        if record is not None:
            self.known(v, key, record)
        return v

    def known(self, d: dict[str, Any], key: str, record: type | Iterable[str]) -> None:
        """Refuse a key the writer never writes: every key of a record is one of its dataclass's fields."""
        names = {f.name for f in fields(record)} if isinstance(record, type) else set(record)
        unknown = sorted(k for k in d if k not in names)
        if unknown:
            shown = unknown[0] if unknown[0].isprintable() and len(unknown[0]) <= 40 else repr(unknown[0][:40])
            more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            raise self.fail(f"{key}.{shown}" if key else shown, f"is not a key assemble writes{more}")

    def get(self, d: dict[str, Any], name: str, key: str, kind: type, *, required: bool = True,
            default: Any = None) -> Any:
        full = f"{key}.{name}" if key else name
        if name not in d or d[name] is None:
            if required:
                raise self.fail(full, "is missing")
            return default
        v = d[name]
        ok = isinstance(v, kind) and not (kind is int and isinstance(v, bool))
        if not ok:
            raise self.fail(full, f"must be {_KIND_WORDS.get(kind, kind)}, not {type(v).__name__}")
        return v

    def strings(self, d: dict[str, Any], name: str, key: str, required: bool = True) -> tuple[str, ...]:
        v = self.get(d, name, key, list, required=required, default=[])
        if not all(isinstance(x, str) for x in v):
            raise self.fail(f"{key}.{name}" if key else name, "must be a list of strings")
        return tuple(v)

    @overload
    def matching(self, d: dict[str, Any], name: str, key: str, pattern: re.Pattern[str], what: str,
                 required: Literal[True]) -> str: ...

    @overload
    def matching(self, d: dict[str, Any], name: str, key: str, pattern: re.Pattern[str], what: str,
                 required: bool = False) -> str | None: ...

    def matching(self, d: dict[str, Any], name: str, key: str, pattern: re.Pattern[str], what: str,
                 required: bool = False) -> str | None:
        """A string that other stages use as a name or a number: checked here, once."""
        v: str | None = self.get(d, name, key, str, required=required)
        if v is not None and not pattern.fullmatch(v):
            raise self.fail(f"{key}.{name}" if key else name, f"{v[:40]!r} is not {what}")
        return v

    def targets(self, d: dict[str, Any], name: str, grammar: Callable[[str], object]) -> tuple[str, ...]:
        """GPU targets, each in the grammar build took it in (config/targets.py)."""
        values = self.strings(d, name, "gpu_targets", required=False)
        for v in values:
            try:
                grammar(v)
            except AssembleError as exc:
                raise self.fail(f"gpu_targets.{name}", exc.what) from None
        return values

    def path(self, v: Any, key: str) -> str:
        """A runtime-relative path: relative, normalised, inside."""
        if not isinstance(v, str) or not v:
            raise self.fail(key, "must be a non-empty path")
        norm = posixpath.normpath(v)
        if (v.startswith("/") or v != norm or norm == "." or norm.startswith("../") or norm == ".."
                or "\\" in v or "\x00" in v or norm == NAME):
            raise self.fail(key, f"{v!r} is not a clean path inside the runtime")
        return v


_KIND_WORDS = {str: "a string", int: "a whole number", list: "a list", dict: "an object", bool: "true or false"}


MAX_DEPTH = 32     # no record of ours nests deeper; a deeper one is not ours (and could not be written back)


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep a JSON value nests, counting no further than limit + 1 (iterative: no recursion to exhaust)."""
    stack, deepest = [(value, 1)], 0
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _parse(raw: Any, where: str) -> Manifest:
    r = _Reader(where)
    if _depth(raw) > MAX_DEPTH:
        raise r.fail("", f"nests deeper than {MAX_DEPTH} levels")
    top = r.obj(raw, "", Manifest)
    schema = r.get(top, "schema", "", int)
    if schema not in READABLE:
        raise r.fail("schema", f"is {schema}; this assemble reads {', '.join(map(str, READABLE))}")
    created_by = r.get(top, "created_by", "", str)
    if not created_by.startswith(CREATOR + " "):
        raise r.fail("created_by", f"is {created_by!r}: not written by {CREATOR}")
    rec = r.obj(top.get("recipe"), "recipe", RecipeRecord)
    recipe = RecipeRecord(name=_recipe_name(r, rec), description=r.get(rec, "description", "recipe", str, required=False,
                                                                  default=""),
                          backends=r.strings(rec, "backends", "recipe"),
                          targets=r.strings(rec, "targets", "recipe", required=False),
                          file=r.get(rec, "file", "recipe", str, required=False, default=""))
    ll = r.obj(top.get("llama_cpp"), "llama_cpp", SourceRecord)
    patches = tuple(PatchRecord(name=r.get(p, "name", f"llama_cpp.patches[{i}]", str),
                                file=r.matching(p, "file", f"llama_cpp.patches[{i}]", _FILE_NAME, "a file name",
                                                required=True),
                                sha256=r.get(p, "sha256", f"llama_cpp.patches[{i}]", str),
                                fixes=r.get(p, "fixes", f"llama_cpp.patches[{i}]", str, required=False, default=""))
                    for i, p in enumerate(r.obj(x, f"llama_cpp.patches[{i}]", PatchRecord) for i, x in
                                          enumerate(r.get(ll, "patches", "llama_cpp", list, required=False,
                                                          default=[]))))
    source = SourceRecord(sha=r.matching(ll, "sha", "llama_cpp", SHA_RE, "a 40-hex commit"),
                          commit_time=r.get(ll, "commit_time", "llama_cpp", int, required=False),
                          source=_provenance(r, r.get(ll, "source", "llama_cpp", dict)),
                          features=r.get(ll, "features", "llama_cpp", dict, required=False, default={}),
                          patches=patches,
                          build=r.matching(ll, "build", "llama_cpp", BUILD_RE, "an upstream build number"))
    files, seen = [], set()
    for i, f in enumerate(r.get(top, "files", "", list)):
        key = f"files[{i}]"
        f = r.obj(f, key, FileEntry)
        path = r.path(f.get("path"), f"{key}.path")
        role = r.get(f, "role", key, str)
        if role not in ROLES:
            raise r.fail(f"{key}.role", f"is {role!r}, not one of {', '.join(ROLES)}")
        sha = r.get(f, "sha256", key, str)
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise r.fail(f"{key}.sha256", "is not a sha256 in hex")
        size, mode = r.get(f, "size", key, int), r.get(f, "mode", key, int)
        if size < 0 or not 0 <= mode <= 0o7777:
            raise r.fail(key, "has a negative size or an impossible mode")
        if path in seen:
            raise r.fail(f"{key}.path", f"{path} is listed twice")
        seen.add(path)
        files.append(FileEntry(path, role, r.get(f, "origin", key, str, required=False, default=""), sha, size, mode))
    links = []
    for i, s in enumerate(r.get(top, "symlinks", "", list, required=False, default=[])):
        key = f"symlinks[{i}]"
        s = r.obj(s, key, LinkEntry)
        path = r.path(s.get("path"), f"{key}.path")
        target = r.get(s, "target", key, str)
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if target.startswith("/") or resolved == ".." or resolved.startswith("../") or resolved == ".":
            raise r.fail(f"{key}.target", f"{path} -> {target!r} leads outside the runtime")
        if path in seen:
            raise r.fail(f"{key}.path", f"{path} is listed twice")
        seen.add(path)
        links.append(LinkEntry(path, target))
    gpu = r.get(top, "gpu_targets", "", dict, required=False, default={})
    r.known(gpu, "gpu_targets", GpuTargets)
    units = tuple(_unit(r, r.obj(u, f"units[{i}]", UnitRecord), f"units[{i}]")
                  for i, u in enumerate(r.get(top, "units", "", list, required=False, default=[])))
    system = tuple(SystemLib(r.get(s, "soname", f"system_libs[{i}]", str), r.get(s, "reason", f"system_libs[{i}]", str,
                                                                                 required=False, default=""),
                             r.strings(s, "needed_by", f"system_libs[{i}]", required=False))
                   for i, s in enumerate(r.obj(x, f"system_libs[{i}]", SystemLib) for i, x in
                                         enumerate(r.get(top, "system_libs", "", list, required=False, default=[]))))
    sizes = _sizes(r, r.get(top, "size_by_role", "", dict, required=False, default={}))
    return Manifest(recipe=recipe, llama_cpp=source, files=tuple(files), symlinks=tuple(links),
                    gpu_targets=GpuTargets(cuda=r.targets(gpu, "cuda", CudaArch.parse),
                                           hip=r.targets(gpu, "hip", GfxTarget.parse)),
                    units=units, system_libs=system,
                    glibc_min=r.matching(top, "glibc_min", "", _SYMBOL_VERSION, "a version like 2.38"),
                    glibcxx_min=r.matching(top, "glibcxx_min", "", _SYMBOL_VERSION, "a version like 3.4.30"),
                    glibc_floor=_glibc_floor(r, r.get(top, "glibc_floor", "", dict, required=False)),
                    size_by_role=sizes, config=r.get(top, "config", "", dict, required=False),
                    gpu_runtimes=_gpu_runtimes(r, r.get(top, "gpu_runtimes", "", dict, required=False, default={})),
                    inputs=tuple(_input(r, r.obj(x, f"inputs[{i}]", InputRecord), f"inputs[{i}]") for i, x in
                                 enumerate(r.get(top, "inputs", "", list, required=False, default=[]))),
                    left_out=_left_out(r, top),
                    loader=_loader(r, r.get(top, "loader", "", dict, required=False)),
                    platform=_platform(r, top), licenses=_licenses(r, top, seen), schema=schema,
                    created_by=created_by)


def _licenses(r: _Reader, top: dict[str, Any], listed: set[str]) -> tuple[LicenseRecord, ...]:
    out = []
    for i, d in enumerate(r.get(top, "licenses", "", list, required=False, default=[])):
        key = f"licenses[{i}]"
        d = r.obj(d, key, LicenseRecord)
        texts = tuple(r.path(t, f"{key}.texts") for t in r.strings(d, "texts", key))
        covers = tuple(r.path(c, f"{key}.covers") for c in r.strings(d, "covers", key))
        stray = next((p for p in texts + covers if p not in listed), None)
        if stray is not None:
            raise r.fail(key, f"names {stray}, which is not among the runtime's files")
        out.append(LicenseRecord(r.matching(d, "component", key, _FILE_NAME, "a component name", required=True),
                                 r.get(d, "spdx", key, str, required=False), texts, covers,
                                 r.get(d, "source", key, str, required=False, default="")))
    return tuple(out)


def _glibc_floor(r: _Reader, d: dict[str, Any] | None) -> GlibcFloor | None:
    if d is None:
        return None
    r.known(d, "glibc_floor", GlibcFloor)
    by = r.get(d, "stated_by", "glibc_floor", str, required=False)
    if by is not None and by not in glibc.STATED_BY:
        raise r.fail("glibc_floor.stated_by", f"is {by[:40]!r}, not one of {', '.join(glibc.STATED_BY)}")
    needed_by = r.get(d, "needed_by", "glibc_floor", str, required=False)
    return GlibcFloor(promised=r.matching(d, "promised", "glibc_floor", glibc.FLOOR_RE, glibc.FLOOR_FORM),
                      stated_by=by, needed_by=None if needed_by is None else r.path(needed_by, "glibc_floor.needed_by"))


def _platform(r: _Reader, top: dict[str, Any]) -> str:
    platform: str = r.get(top, "platform", "", str, required=False, default="linux")
    if platform not in PLATFORMS:
        raise r.fail("platform", f"is {platform!r}, not one of {', '.join(PLATFORMS)}")
    return platform


_INPUT_KINDS = ("folder", "archive", "debs")


def _input(r: _Reader, d: dict[str, Any], key: str) -> InputRecord:
    kind = r.get(d, "kind", key, str)
    if kind not in _INPUT_KINDS:
        raise r.fail(f"{key}.kind", f"is {kind!r}, not one of {', '.join(_INPUT_KINDS)}")
    sha = r.get(d, "sha256", key, str, required=False)
    if sha is not None and (len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
        raise r.fail(f"{key}.sha256", "is not a sha256 in hex")
    return InputRecord(given=r.get(d, "given", key, str), kind=kind, sha256=sha,
                       version=r.matching(d, "version", key, _SYMBOL_VERSION, "a version like 0.9.4"),
                       build=r.matching(d, "build", key, _FILE_NAME, "a build tag like b7416"),
                       base=r.get(d, "base", key, str, required=False, default=""),
                       contributed=r.strings(d, "contributed", key, required=False))


_LEFT_OUT_MAX = 100_000       # files of every input; an input holds at most Limits.members


def _left_out(r: _Reader, top: dict[str, Any]) -> tuple[LeftOutRecord, ...]:
    raw = r.get(top, "left_out", "", list, required=False, default=[])
    if len(raw) > _LEFT_OUT_MAX:
        raise r.fail("left_out", f"lists more than {_LEFT_OUT_MAX} files")
    out = []
    for i, d in enumerate(raw):
        key = f"left_out[{i}]"
        d = r.obj(d, key, LeftOutRecord)
        rec = LeftOutRecord(r.get(d, "path", key, str), r.get(d, "reason", key, str))
        for name, v in (("path", rec.path), ("reason", rec.reason)):
            if not v or len(v) > 4096 or any(c in v for c in "\x00\n\r"):
                raise r.fail(f"{key}.{name}", "must be one non-empty line")
        out.append(rec)
    return tuple(out)


def _loader(r: _Reader, d: dict[str, Any] | None) -> LoaderRecord | None:
    if d is None:
        return None
    r.known(d, "loader", LoaderRecord)
    dirs = r.strings(d, "backend_dirs", "loader", required=False)
    if any(not x.startswith("/") for x in dirs):
        raise r.fail("loader.backend_dirs", "must be absolute folders (as compiled into ggml)")
    return LoaderRecord(dirs, r.get(d, "accepted_risk", "loader", str, required=False))


_CODE_NAME = re.compile(r"(sm|compute)_[1-9][0-9]{1,2}[af]?")
_DRIVER = re.compile(r"(\d{1,4}(\.\d{1,4}){0,3})?")        # "" when unknown


def _gpu_runtimes(r: _Reader, d: dict[str, Any]) -> GpuRuntimes:
    key = "gpu_runtimes"
    r.known(d, key, GpuRuntimes)
    cuda = rocm = None
    if (c := r.get(d, "cuda", key, dict, required=False)) is not None:
        k = f"{key}.cuda"
        r.known(c, k, CudaRuntimeRecord)
        modules = []
        for i, m in enumerate(r.get(c, "modules", k, list, required=False, default=[])):
            mk = f"{k}.modules[{i}]"
            m = r.obj(m, mk, CudaModuleCode)
            sass, ptx = r.strings(m, "sass", mk, required=False), r.strings(m, "ptx", mk, required=False)
            bad = next((n for n in sass + ptx if not _CODE_NAME.fullmatch(n)), None)
            if bad is not None:
                raise r.fail(mk, f"{bad[:40]!r} is not a CUDA code object name like sm_86 or compute_75")
            modules.append(CudaModuleCode(r.path(m.get("path"), f"{mk}.path"), sass, ptx))
        cuda = CudaRuntimeRecord(version=r.matching(c, "version", k, _DRIVER, "a version like 12.8", required=True),
                                 driver_min=r.matching(c, "driver_min", k, _DRIVER, "a driver version",
                                                       required=True),
                                 driver_for_ptx=r.matching(c, "driver_for_ptx", k, _DRIVER, "a driver version",
                                                           required=True),
                                 source=r.get(c, "source", k, str, required=False, default=""),
                                 modules=tuple(modules))
    if (h := r.get(d, "rocm", key, dict, required=False)) is not None:
        k = f"{key}.rocm"
        r.known(h, k, RocmRecord)
        rocm = RocmRecord(version=r.matching(h, "version", k, _DRIVER, "a version like 6.4", required=True),
                          kernel_driver=r.get(h, "kernel_driver", k, str), source=r.get(h, "source", k, str,
                                                                                        required=False, default=""))
    return GpuRuntimes(cuda=cuda, rocm=rocm, notes=r.strings(d, "notes", key, required=False))


def _provenance(r: _Reader, d: dict[str, Any]) -> Provenance:
    known = {f.name for f in fields(Provenance)}
    r.known(d, "llama_cpp.source", Provenance)
    values = {k: r.get(d, k, "llama_cpp.source", bool if k == "dirty" else str, required=k == "kind")
              for k in known | set(d)}
    return Provenance(**{k: v for k, v in values.items() if v is not None})


def _recipe_name(r: _Reader, rec: dict[str, Any]) -> str:
    """Archive and folder names are made from it: only the recipe grammar, never a path."""
    name: str = r.get(rec, "name", "recipe", str)
    if not NAME_RE.fullmatch(name):
        raise r.fail("recipe.name", f"{name!r} is not a recipe name")
    return name


def _unit(r: _Reader, u: dict[str, Any], key: str) -> UnitRecord:
    return UnitRecord(name=r.get(u, "name", key, str), backends=r.strings(u, "backends", key),
                      container=r.get(u, "container", key, str, required=False),
                      cuda_policy=r.get(u, "cuda_policy", key, dict, required=False),
                      hip_policy=r.get(u, "hip_policy", key, dict, required=False),
                      built_elsewhere=r.get(u, "built_elsewhere", key, dict, required=False),
                      build_dir=r.get(u, "build_dir", key, str, required=False, default=""),
                      configure=r.strings(u, "configure", key, required=False),
                      build=r.strings(u, "build", key, required=False),
                      defines=r.get(u, "defines", key, dict, required=False, default={}),
                      toolchain=r.get(u, "toolchain", key, dict, required=False, default={}),
                      environment=_environment(r, r.get(u, "environment", key, dict, required=False), f"{key}.environment"),
                      cache=r.get(u, "cache", key, dict, required=False))


def _environment(r: _Reader, d: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """What the build passed of the caller's environment, in the shape builder.units.environment
    writes it (BuildEnv.as_dict): names passed, the keyed ones with their values, names scrubbed.
    Which names the policy could have passed is verify's question (builder.check.facts)."""
    if d is None:
        return None
    r.known(d, key, ENVIRONMENT_KEYS)
    r.strings(d, "passed", key, required=False)
    r.strings(d, "scrubbed", key, required=False)
    keyed = r.get(d, "keyed", key, dict, required=False, default={})
    if not all(isinstance(v, str) for v in keyed.values()):
        raise r.fail(f"{key}.keyed", "must map names to strings")
    return d


def _sizes(r: _Reader, d: dict[str, Any]) -> dict[str, Any]:
    r.known(d, "size_by_role", ROLES)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in d.values()):
        raise r.fail("size_by_role", "must map roles to byte counts")
    return d


def _plain(obj: Any) -> Any:
    """Dataclasses to JSON values in field order, dict keys sorted: the same manifest, the same bytes."""
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
