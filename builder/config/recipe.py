"""Load and validate recipes (TOML, one file per recipe) into frozen plain data.

Every error names the file, the key and the fix, in one line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.config import cpulevels, glibc
from builder.config.upstream import BUILD_RE
from builder.config.targets import DEFAULT_CUDA_ARCHITECTURES, CudaArch, GfxTarget
from builder.config.versions import CONSTRAINT_FORMS, parse_constraint
from builder.errors import AssembleError
from builder.paths import builtin_data, data_dir

SHA_RE = re.compile(r"[0-9a-f]{40}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
# A recipe (or patch) name: it becomes a folder (runtime-NAME), an archive stem and a workflow job id,
# so it is short as well as plain (a 1,020-character name once made a YAML key no reader takes).
NAME_MAX = 64
NAME_RE = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{NAME_MAX - 1}}}")
NAME_FORM = f"use lower-case letters, digits, '-', '_' and '.', at most {NAME_MAX} characters"
# The grammar of every other string a recipe can set, checked at load (always with fullmatch: `$`
# lets a trailing newline through), so nothing downstream ever sees one it would have to escape.
CMAKE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TARGET_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")                 # a CMake target
# a container unit's image name is a path component of an OCI reference (the distribution spec's
# grammar): assemble tags its image assemble-<name>:<digest> from containers/<name>.Containerfile
CONTAINER_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
GLOB_RE = re.compile(r"[A-Za-z0-9_.+*?\[\]-]+")                         # a soname glob (bundle.never/always)
URL_RE = re.compile(r"(?!-)[^\x00-\x1f\x7f]+")       # a git URL or a local repository: never an option
PYPI_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
PATH_RE = re.compile(r"[^\x00-\x1f\x7f]+")                              # a folder: no control characters
# a folder inside an archive: relative, no `..`, no spaces (sdist subdir)
SUBDIR_RE = re.compile(r"(?!\.\.(?:/|$))[A-Za-z0-9_.+-]+(?:/(?!\.\.(?:/|$))[A-Za-z0-9_.+-]+)*/?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")                      # free text keeps tabs and newlines
_FREE_TEXT = {"description", "multi_arch_risk"}                          # and the stated reasons (tables of text)

BACKENDS = ("cpu", "cuda", "hip", "vulkan")
# Device-name prefixes ggml gives each backend's devices in --list-devices.
DEVICE_PREFIX = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan"}
DEFAULT_TARGETS = ("llama-server", "llama-cli", "llama-bench")
ALL_VARIANTS_FEATURE = "cpu-all-variants"   # what [cpu] variants = "all" needs of the tree (features.toml)
MIRROR_KINDS = ("git", "sdist", "local")


@dataclass(frozen=True)
class Mirror:
    kind: str                    # git | sdist | local
    url: str | None = None       # git: clone URL
    package: str | None = None   # sdist: PyPI project that vendors llama.cpp
    version: str | None = None
    sha256: str | None = None    # sdist: the archive's sha256
    subdir: str | None = None    # sdist: where llama.cpp sits inside it
    path: str | None = None      # local: a directory

    def label(self) -> str:
        if self.kind == "git":
            return f"git {self.url}"
        if self.kind == "sdist":
            return f"sdist {self.package}=={self.version}"
        return f"local {self.path}"

    def field(self, name: str) -> str:
        """A field this kind of mirror always has (the recipe check refuses one without it)."""
        value = getattr(self, name)
        assert isinstance(value, str), f"a {self.kind} mirror without {name}"
        return value


@dataclass(frozen=True)
class Pin:
    sha: str
    features: tuple[str, ...] = ()
    mirrors: tuple[Mirror, ...] = ()
    lock: str | None = None      # the lock file the sha came from (`assemble pin --lock`), if any
    build: str | None = None     # upstream's build number for sha ("b7416", "b7416+3"), as pin found it


@dataclass(frozen=True)
class CudaSettings:
    architectures: tuple[CudaArch, ...] = ()
    toolkit: str | None = None          # version constraint, e.g. ">=12.4" or "==12.8"
    accept_blackwell_regression: bool = False


@dataclass(frozen=True)
class HipSettings:
    targets: tuple[GfxTarget, ...] = ()
    multi_arch_risk: str | None = None  # required to build more than one gfx target
    rccl: bool = False


@dataclass(frozen=True)
class CpuSettings:
    variants: str = cpulevels.ALL       # all (GGML_CPU_ALL_VARIANTS) | one level (builder.config.cpulevels)


@dataclass(frozen=True)
class BundledTests:
    """[tests]: the upstream test programs built beside the runtime (into its tests/ folder)."""
    backend_ops: bool = False           # test-backend-ops: every op on each GPU backend against the CPU's


def default_backend_ops(backends: tuple[str, ...]) -> bool:
    """[tests] backend_ops when the recipe does not say: on with a GPU backend (there is something to
    compare with the CPU), off for a CPU-only recipe. The one home of that rule."""
    return any(b != "cpu" for b in backends)


@dataclass(frozen=True)
class Unit:
    name: str
    backends: tuple[str, ...]
    container: str | None = None        # build inside this container environment
    defines: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    description: str
    backends: tuple[str, ...]
    pin: Pin
    units: tuple[Unit, ...]
    targets: tuple[str, ...] = DEFAULT_TARGETS
    aliases: tuple[str, ...] = ()
    cuda: CudaSettings | None = None
    hip: HipSettings | None = None
    vulkan: bool = False
    cpu: CpuSettings = field(default_factory=CpuSettings)
    defines: tuple[tuple[str, str], ...] = ()
    patches_off: tuple[tuple[str, str], ...] = ()        # (patch name, stated reason)
    patches_on: tuple[str, ...] = ()                     # opt-in patches this recipe asks for
    bundle_never: tuple[tuple[str, str], ...] = ()       # (soname glob, reason)
    bundle_always: tuple[tuple[str, str], ...] = ()      # (soname glob, reason)
    glibc_floor: str | None = None                       # the oldest glibc it promises to start on (config.glibc)
    bundle_licenses: tuple[tuple[str, str], ...] = ()    # (library file glob, its licence text: an absolute path)
    tests: BundledTests = field(default_factory=BundledTests)

    def gpu_backends(self) -> tuple[str, ...]:
        return tuple(b for b in self.backends if b != "cpu")

    @property
    def cuda_toolkit(self) -> str | None:
        """[cuda] toolkit, the version constraint; None when none is given (or no [cuda])."""
        return self.cuda.toolkit if self.cuda else None

    @property
    def hip_targets(self) -> tuple[GfxTarget, ...]:
        """[hip] targets; () when the recipe has no [hip]."""
        return self.hip.targets if self.hip else ()

    def backend_ops_unit(self) -> str | None:
        """The unit that builds test-backend-ops ([tests] backend_ops on), None when off. One unit
        builds it: the program loads every backend module of the merged runtime at run time, so any
        unit's copy judges them all; the unit with the most GPU backends (the first on a tie) links it
        against the fullest ggml, and is the one a --only-unit run on the GPU host builds."""
        if not self.tests.backend_ops:
            return None
        return max(self.units, key=lambda u: sum(b != "cpu" for b in u.backends)).name   # max: the first on a tie


# --- schema ----------------------------------------------------------------

_TOP = {
    "name": str, "description": str, "aliases": list, "backends": list, "targets": list,
    "pin": dict, "units": list, "cuda": dict, "hip": dict, "vulkan": dict, "cpu": dict,
    "cmake": dict, "patches": dict, "bundle": dict, "glibc_floor": str, "tests": dict,
}
_PIN = {"sha": str, "features": list, "mirrors": list, "build": str}
_MIRROR = {"kind": str, "url": str, "package": str, "version": str, "sha256": str,
           "subdir": str, "path": str}
_CUDA = {"architectures": list, "toolkit": str, "accept_blackwell_regression": bool}
_HIP = {"targets": list, "multi_arch_risk": str, "rccl": bool}
_VULKAN: dict[str, Any] = {}
_CPU = {"variants": str}
_UNIT = {"name": str, "backends": list, "container": str, "defines": dict}
_CMAKE = {"defines": dict}
_PATCHES = {"disable": dict, "enable": list}
_BUNDLE = {"never": dict, "always": dict, "licenses": dict}
_TESTS = {"backend_ops": bool}

_TYPE_NAMES = {str: "a string", list: "a list", dict: "a table", bool: "true or false"}


class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, what: str, fix: str) -> AssembleError:
        return AssembleError(what, where=f"{self.path}: {key}", fix=fix)

    def table(self, data: dict[str, Any], schema: dict[str, Any], prefix: str) -> dict[str, Any]:
        for key, value in data.items():
            full = f"{prefix}{key}"
            if key not in schema:
                known = ", ".join(sorted(schema)) or "(none)"
                raise self.fail(full, f"unknown key '{key}'", f"remove it; known keys here: {known}")
            want = schema[key]
            ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
            if not ok:
                raise self.fail(full, f"expected {_TYPE_NAMES[want]}, got {type(value).__name__}",
                                f"write {full} as {_TYPE_NAMES[want]}")
        return data

    def strings(self, value: list[Any], key: str) -> tuple[str, ...]:
        for item in value:
            if not isinstance(item, str) or not item:
                raise self.fail(key, f"expected a list of non-empty strings, found {item!r}",
                                f"quote each entry of {key}")
        return tuple(value)

    def grammar(self, value: str, key: str, pattern: re.Pattern[str], what: str, fix: str) -> str:
        if not pattern.fullmatch(value):
            raise self.fail(key, f"{value!r} is not {what}", fix)
        return value

    def no_control(self, value: object, key: str, free_text: bool = False) -> None:
        """No string anywhere in a recipe carries a control character (free text may keep newlines)."""
        if isinstance(value, dict):
            for k, v in value.items():
                where = f"{key}.{k}" if key else k
                self.no_control(k, where, free_text)
                self.no_control(v, where, free_text or k in _FREE_TEXT or k in ("disable", "never", "always"))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.no_control(v, f"{key}[{i}]", free_text)
        elif isinstance(value, str):
            bad = _CONTROL.search(value) if free_text else re.search(r"[\x00-\x1f\x7f]", value)
            if bad:
                raise self.fail(key, f"{value[:40]!r} holds a control character ({bad.group()!r})",
                                "write it on one line, without control characters")

    def defines(self, value: dict[str, Any], key: str) -> tuple[tuple[str, str], ...]:
        out = []
        for name, val in value.items():
            if not CMAKE_NAME_RE.fullmatch(name):
                raise self.fail(f"{key}.{name}", "not a CMake variable name",
                                "use letters, digits and underscores")
            if isinstance(val, bool):
                val = "ON" if val else "OFF"
            if not isinstance(val, (str, int)):
                raise self.fail(f"{key}.{name}", f"expected a string, number or boolean, got {type(val).__name__}",
                                'write it as "VALUE", a number or true/false')
            out.append((name, str(val)))
        return tuple(out)

    def reasons(self, value: dict[str, Any], key: str) -> tuple[tuple[str, str], ...]:
        for name, reason in value.items():
            if not isinstance(reason, str) or not reason.strip():
                raise self.fail(f"{key}.{name}", "needs a stated reason",
                                f'write {name} = "why this is right for this recipe"')
        return tuple(value.items())


def _mirror(c: _Checker, raw: object, key: str, pin_sha: str) -> Mirror:
    if not isinstance(raw, dict):
        raise c.fail(key, "expected a table", "write mirrors as [[pin.mirrors]] tables")
    c.table(raw, _MIRROR, key + ".")
    kind = raw.get("kind")
    if kind not in MIRROR_KINDS:
        raise c.fail(f"{key}.kind", f"unknown mirror kind {kind!r}", f"use one of: {', '.join(MIRROR_KINDS)}")
    needs = {"git": ("url",), "sdist": ("package", "version", "sha256", "subdir"), "local": ("path",)}[kind]
    for need in needs:
        if not raw.get(need):
            raise c.fail(f"{key}.{need}", f"a {kind} mirror needs '{need}'", f"add {need} = \"...\"")
    if kind == "sdist" and not SHA256_RE.fullmatch(raw["sha256"]):
        raise c.fail(f"{key}.sha256", "not a 64-hex sha256", "copy the archive's sha256 from PyPI")
    for field_, pattern, what in (("url", URL_RE, "a git URL"), ("package", PYPI_NAME_RE, "a PyPI project name"),
                                  ("version", VERSION_RE, "a version"), ("subdir", SUBDIR_RE, "a relative folder without '..'"),
                                  ("path", PATH_RE, "a folder")):
        if raw.get(field_) is not None:
            c.grammar(raw[field_], f"{key}.{field_}", pattern, what, f"write {field_} as {what}, on one line")
    return Mirror(**raw)


def _backend_list(c: _Checker, raw: list[Any], key: str) -> tuple[str, ...]:
    names = c.strings(raw, key)
    for b in names:
        if b not in BACKENDS:
            hint = " (the ROCm backend is called 'hip')" if b in ("rocm", "amd") else ""
            raise c.fail(key, f"unknown backend '{b}'{hint}", f"use some of: {', '.join(BACKENDS)}")
    if len(set(names)) != len(names):
        raise c.fail(key, "a backend is listed twice", "list each backend once")
    return names


def parse_recipe(path: Path, text: str | None = None) -> Recipe:
    path = Path(path)
    c = _Checker(path)
    if text is None and path.is_dir():
        raise AssembleError("is a folder, not a recipe file", where=str(path),
                            fix="name one .toml file in it (assemble list shows the shipped recipes)")
    try:
        # utf-8-sig: an editor's byte-order mark is not part of the recipe (TOML itself has no BOM)
        data = tomllib.loads(text.removeprefix("\ufeff") if text is not None else path.read_text(encoding="utf-8-sig"))
    except tomllib.TOMLDecodeError as exc:
        raise AssembleError(f"not valid TOML ({exc})", where=str(path),
                            fix="correct the syntax at the position named") from None
    except RecursionError:
        raise AssembleError("arrays or tables nested too deeply to read", where=str(path),
                            fix="a recipe nests a few levels at most: remove the deep nesting") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AssembleError(f"cannot read recipe ({exc})", where=str(path), fix="check the path") from None
    c.table(data, _TOP, "")
    for need in ("name", "description", "backends", "pin"):
        if need not in data:
            raise c.fail(need, f"missing required key '{need}'", f"add {need} to the recipe")
    name = data["name"]
    if not NAME_RE.fullmatch(name):
        shown = name if len(name) <= NAME_MAX + 16 else name[:NAME_MAX] + f"... ({len(name)} characters)"
        raise c.fail("name", f"invalid recipe name {shown!r}", NAME_FORM)
    aliases = tuple(c.grammar(a, "aliases", NAME_RE, "a recipe name", NAME_FORM)
                    for a in c.strings(data.get("aliases", []), "aliases"))
    backends = _backend_list(c, data["backends"], "backends")
    if "cpu" not in backends:
        backends = backends + ("cpu",)  # ggml always needs its CPU backend beside the GPU ones

    pin_raw = c.table(data["pin"], _PIN, "pin.")
    sha = pin_raw.get("sha")
    if not isinstance(sha, str) or not SHA_RE.fullmatch(sha):
        raise c.fail("pin.sha", f"{sha!r} is not a full 40-hex commit sha",
                     "pin the full sha (assemble pin RECIPE writes it for you)")
    mirrors_raw = pin_raw.get("mirrors", [])
    if not mirrors_raw:
        raise c.fail("pin.mirrors", "no source mirror", "add at least one [[pin.mirrors]] table")
    mirrors = tuple(_mirror(c, m, f"pin.mirrors[{i}]", sha) for i, m in enumerate(mirrors_raw))
    locked = read_lock(path) if text is None else None  # a lock file next to the recipe wins
    build = pin_raw.get("build")
    if build is not None and not BUILD_RE.fullmatch(build):
        raise c.fail("pin.build", f"{build!r} is not an upstream build number",
                     'write it as upstream tags it ("b7416", or "b7416+3" three commits after it), '
                     "or let assemble pin write it")
    features = c.strings(pin_raw.get("features", []), "pin.features")
    known = registry_names()
    for feature in features:
        if feature not in known:
            raise c.fail("pin.features", f"unknown feature '{feature}'",
                         f"use names from the registry (builder/data/features.toml): {', '.join(sorted(known))}")
    pin = Pin(sha=locked[0] if locked else sha, features=features, mirrors=mirrors,
              lock=str(lock_path(path)) if locked else None, build=locked[1] if locked else build)

    targets = tuple(c.grammar(x, "targets", TARGET_RE, "a CMake target name", 'name a target, e.g. "llama-server"')
                    for x in c.strings(data.get("targets", list(DEFAULT_TARGETS)), "targets"))
    if not targets:
        raise c.fail("targets", "no build target", 'list at least "llama-server"')

    cuda = hip = None
    if "cuda" in data or "cuda" in backends:
        raw = c.table(data.get("cuda", {}), _CUDA, "cuda.")
        listed = c.strings(raw.get("architectures", list(DEFAULT_CUDA_ARCHITECTURES)), "cuda.architectures")
        archs = tuple(CudaArch.parse(a, where=f"{path}: cuda.architectures") for a in listed)
        if "cuda" in backends and not archs:
            raise c.fail("cuda.architectures", "an empty architecture list builds CUDA code for no card",
                         'list them, e.g. ["90"], or drop the key for the default (a portable runtime never '
                         'builds for "native")')
        if raw.get("toolkit") is not None:
            try:
                parse_constraint(raw["toolkit"])
            except ValueError as exc:
                raise c.fail("cuda.toolkit", str(exc), f"write it as {CONSTRAINT_FORMS}") from None
        cuda = CudaSettings(architectures=archs, toolkit=raw.get("toolkit"),
                            accept_blackwell_regression=raw.get("accept_blackwell_regression", False))
    if "hip" in data or "hip" in backends:
        raw = c.table(data.get("hip", {}), _HIP, "hip.")
        targets_hip = tuple(GfxTarget.parse(t, where=f"{path}: hip.targets")
                            for t in c.strings(raw.get("targets", []), "hip.targets"))
        if "hip" in backends and not targets_hip:
            raise c.fail("hip.targets", "the hip backend needs exactly one gfx target",
                         'add targets = ["gfx1100"] (the exact arch of the card)')
        if len(targets_hip) > 1 and not raw.get("multi_arch_risk"):
            raise c.fail("hip.targets", f"{len(targets_hip)} gfx targets in one unit",
                         "build one unit per card arch (a sibling arch links, loads and then segfaults), "
                         "or state multi_arch_risk = \"...\" to accept a multi-arch build")
        hip = HipSettings(targets=targets_hip, multi_arch_risk=raw.get("multi_arch_risk"),
                          rccl=raw.get("rccl", False))
    if "vulkan" in data:
        c.table(data["vulkan"], _VULKAN, "vulkan.")
    cpu_raw = c.table(data.get("cpu", {}), _CPU, "cpu.")
    variants = cpu_raw.get("variants", cpulevels.ALL)
    if variants != cpulevels.ALL and cpulevels.level(variants) is None:
        raise c.fail("cpu.variants", f"unknown value {variants!r}",
                     f'use "all" (every level, the best picked at run time) or one level: '
                     f'{", ".join(lv.name for lv in cpulevels.LEVELS)} ("haswell" is AVX2)')
    if variants == cpulevels.ALL and ALL_VARIANTS_FEATURE not in pin.features:
        pin = dataclasses.replace(pin, features=pin.features + (ALL_VARIANTS_FEATURE,))  # the tree must offer it

    defines = c.defines(c.table(data.get("cmake", {}), _CMAKE, "cmake.").get("defines", {}), "cmake.defines")
    patches_raw = c.table(data.get("patches", {}), _PATCHES, "patches.")
    patches_off = c.reasons(patches_raw.get("disable", {}), "patches.disable")
    patches_on = tuple(c.grammar(x, "patches.enable", NAME_RE, "a patch name", "name a patch under patches/")
                       for x in c.strings(patches_raw.get("enable", []), "patches.enable"))
    for name_ in dict(patches_off):
        c.grammar(name_, f"patches.disable.{name_}", NAME_RE, "a patch name", "name a patch under patches/")
    bundle = c.table(data.get("bundle", {}), _BUNDLE, "bundle.")
    never = c.reasons(bundle.get("never", {}), "bundle.never")
    always = c.reasons(bundle.get("always", {}), "bundle.always")
    licenses = _licence_texts(c, bundle.get("licenses", {}), path)

    floor = data.get("glibc_floor")
    if floor is not None and not glibc.FLOOR_RE.fullmatch(floor):
        raise c.fail("glibc_floor", f"{floor[:40]!r} is not {glibc.FLOOR_FORM}",
                     f'write the oldest glibc the runtime must start on, e.g. glibc_floor = "{glibc.RELEASE_FLOOR}" '
                     "(Ubuntu 22.04)")
    for key_, globs in (("bundle.never", never), ("bundle.always", always)):
        for glob, _ in globs:
            c.grammar(glob, f"{key_}.{glob}", GLOB_RE, "a library file name or glob", 'write e.g. "libcuda.so*"')

    units = _units(c, data.get("units"), backends)
    tests_raw = c.table(data.get("tests", {}), _TESTS, "tests.")
    tests = BundledTests(backend_ops=tests_raw.get("backend_ops", default_backend_ops(backends)))
    c.no_control(data, "")          # last: a key's own grammar, or its being unknown, is the clearer message
    return Recipe(name=name, path=path, description=data["description"], backends=backends, pin=pin,
                  units=units, targets=targets, aliases=aliases, cuda=cuda, hip=hip,
                  vulkan="vulkan" in backends, cpu=CpuSettings(variants=variants), defines=defines,
                  patches_off=patches_off, patches_on=patches_on, bundle_never=never, bundle_always=always,
                  glibc_floor=floor, bundle_licenses=licenses, tests=tests)


def _licence_texts(c: _Checker, value: dict[str, Any], path: Path) -> tuple[tuple[str, str], ...]:
    """[bundle.licenses] "libfoo.so.*" = "LICENSE.foo": the licence text of a carried library no package
    names, a path inside the recipe's own folder; it must exist when the recipe is read. The text is copied
    verbatim into a public release, so a shared recipe must not reach out of its folder (an ssh key, ~/.netrc)."""
    out = []
    home = Path(path).parent.resolve()
    for glob, text in value.items():
        where = f"bundle.licenses.{glob}"
        if not isinstance(text, str) or not text.strip():
            raise c.fail(where, "needs the path of the library's licence text", f'write "{glob}" = "LICENSE.foo"')
        full = (home / text).resolve()          # symlinks followed: what would really be copied
        if not full.is_relative_to(home):
            raise c.fail(where, f"{text} is outside the recipe's folder {home}",
                         "put the licence text beside the recipe and name it relative to it")
        if not full.is_file():
            raise c.fail(where, f"{text} is not a file", "name the licence text the library's vendor ships "
                                                         "(a path relative to the recipe's folder)")
        out.append((glob, str(full)))
    return tuple(out)


def _units(c: _Checker, raw: list[Any] | None, backends: tuple[str, ...]) -> tuple[Unit, ...]:
    if raw is None:  # the usual case: one CMake configure holds every backend
        return (Unit(name="main", backends=backends),)
    units = []
    for i, u in enumerate(raw):
        key = f"units[{i}]"
        if not isinstance(u, dict):
            raise c.fail(key, "expected a table", "write units as [[units]] tables")
        c.table(u, _UNIT, key + ".")
        if not u.get("name") or not NAME_RE.fullmatch(u["name"]):
            raise c.fail(f"{key}.name", "each unit needs a name", 'add name = "host" (lower-case)')
        ub = _backend_list(c, u.get("backends", []), f"{key}.backends")
        if not ub:
            raise c.fail(f"{key}.backends", "a unit needs at least one backend", 'add backends = ["cuda"]')
        for b in ub:
            if b not in backends:
                raise c.fail(f"{key}.backends", f"backend '{b}' is not among the recipe's backends",
                             f"add it to backends or remove it from {key}")
        if u.get("container") is not None:
            c.grammar(u["container"], f"{key}.container", CONTAINER_RE, "a container name (a lower-case OCI name "
                      "component)", "name one of containers/*.Containerfile, e.g. container = \"cuda12.8-build\"")
        units.append(Unit(name=u["name"], backends=ub, container=u.get("container"),
                          defines=c.defines(u.get("defines", {}), f"{key}.defines")))
    names = [u.name for u in units]
    if len(set(names)) != len(names):
        raise c.fail("units", "two units share a name", "give each unit its own name")
    covered = {b for u in units for b in u.backends}
    missing = [b for b in backends if b not in covered and b != "cpu"]
    if missing:
        raise c.fail("units", f"no unit builds {', '.join(missing)}", "add the backend to one unit")
    return tuple(units)


@functools.cache
def registry_names() -> frozenset[str]:
    """The feature names a recipe may require: the registry's, read here for the names only (the
    detectors are builder.source.features' business), so `show` refuses a typo as `build` would."""
    try:
        data = tomllib.loads(builtin_data("features.toml").read_text(encoding="utf-8"))
        return frozenset(f["name"] for f in data.get("feature", []))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise AssembleError(f"cannot read the feature registry ({exc})", where=str(builtin_data("features.toml")),
                            fix="reinstall assemble; the registry ships inside the package") from None


# --- lock files (written by `assemble pin --lock`) ---------------------------

def lock_path(recipe_path: Path) -> Path:
    return recipe_path.with_name(recipe_path.stem + ".lock.json")


def read_lock(recipe_path: Path) -> tuple[str, str | None] | None:
    """(sha, build number) a lock file next to the recipe pins, if there is one."""
    path = lock_path(Path(recipe_path))
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sha, build = data["sha"], data.get("build")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise AssembleError(f"unreadable lock file ({exc})", where=str(path),
                            fix="delete it and run assemble pin --lock again") from None
    if not isinstance(sha, str) or not SHA_RE.fullmatch(sha):
        raise AssembleError("the lock file's sha is not a 40-hex commit", where=str(path),
                            fix="delete it and run assemble pin --lock again")
    if build is not None and not (isinstance(build, str) and BUILD_RE.fullmatch(build)):
        raise AssembleError("the lock file's build is not an upstream build number", where=str(path),
                            fix="delete it and run assemble pin --lock again")
    return sha, build


# --- lookup ----------------------------------------------------------------

def recipe_dir() -> Path:
    return data_dir("recipes")


def all_recipes() -> list[Recipe]:
    return [parse_recipe(p) for p in sorted(recipe_dir().glob("*.toml"))]


def load_recipe(name_or_path: str) -> Recipe:
    """A recipe by name or alias among the shipped ones, or a path to a .toml file."""
    candidate = Path(name_or_path)
    if candidate.is_dir() and ("/" in name_or_path or name_or_path in (".", "..")):
        return parse_recipe(candidate)          # refused there, in one line: a folder is no recipe
    if name_or_path.endswith(".toml") or candidate.is_file():
        if not candidate.is_file():
            raise AssembleError("no such recipe file", where=name_or_path, fix="check the path")
        return parse_recipe(candidate)
    direct = recipe_dir() / f"{name_or_path}.toml"
    if direct.is_file():
        return parse_recipe(direct)
    recipes = all_recipes()
    for r in recipes:
        if name_or_path in r.aliases:
            return r
    known = ", ".join(sorted(r.name for r in recipes))
    raise AssembleError(f"unknown recipe '{name_or_path}'", fix=f"use one of: {known}, or a path to a .toml file")
