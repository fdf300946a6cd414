"""One resolved configuration per build: the one place every option gets its value.

    defaults (here) -> recipe -> environment -> command line

`resolve(recipe, cli, env)` returns a frozen BuildConfig, computed once and read by every
stage and every command (`show`, `build`, `doctor`, `matrix`), so they cannot disagree. It
probes nothing: which toolkit is *found* at the resolved places is toolchain detection's
job (builder.toolchain.detect), and what the toolkit allows is the rules' (builder.toolchain.rules).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from builder.config import cpulevels, remotecache
from builder.config.recipe import Mirror, Recipe, Unit
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError

# CMake settings of every unit, and why each:
BASE_DEFINES = (
    ("CMAKE_BUILD_TYPE", "Release"),
    ("BUILD_SHARED_LIBS", "ON"),
    ("GGML_BACKEND_DL", "ON"),       # backends as loadable modules: one runtime, many GPUs
    ("GGML_NATIVE", "OFF"),          # never tune for the build host's CPU/GPU
    ("GGML_CCACHE", "OFF"),          # the compiler launcher is chosen explicitly (launcher below)
    ("GGML_OPENMP", "ON"),           # ggml's default, stated: the CPU backend's threads, as upstream ships
    ("LLAMA_BUILD_TESTS", "OFF"),    # ON in the one unit that builds test-backend-ops ([tests] backend_ops)
    ("LLAMA_BUILD_EXAMPLES", "OFF"),
    ("LLAMA_BUILD_TOOLS", "ON"),
    ("LLAMA_BUILD_SERVER", "ON"),
    ("LLAMA_OPENSSL", "ON"),         # HTTPS through the host's OpenSSL, as upstream releases do
    ("LLAMA_BUILD_UI", "OFF"),       # no npm during a build
    ("LLAMA_USE_PREBUILT_UI", "OFF"),  # no network during a build: reproducible, offline-safe
    # libllama's unity sources #include by relative path (CMake >= 4.0; older ones ignore it): the same
    # text on every machine, so a shared compile cache hits them too (docs/lab/2026-11-29-release.md)
    ("CMAKE_UNITY_BUILD_RELOCATABLE", "ON"),
)
RELOCATABLE_UNITY_CMAKE = ">=4.0"    # the CMake that honours CMAKE_UNITY_BUILD_RELOCATABLE
# Defines that change what a backend module expects of libggml-base: units merged
# into one runtime must agree on all of these.
ABI_DEFINES = ("CMAKE_BUILD_TYPE", "BUILD_SHARED_LIBS", "GGML_BACKEND_DL", "GGML_SCHED_MAX_COPIES",
               "GGML_MAX_NAME", "GGML_OPENMP", "LLAMA_OPENSSL")
# Defines with a home of their own: set there, or the rules would judge another value than the one built.
OWNED_DEFINES = {
    "CMAKE_CUDA_ARCHITECTURES": "[cuda] architectures or --cuda-arch",
    "GPU_TARGETS": "[hip] targets or --hip-target", "AMDGPU_TARGETS": "[hip] targets or --hip-target",
    "CMAKE_HIP_ARCHITECTURES": "[hip] targets or --hip-target",
    "GGML_CUDA": "the recipe's backends", "GGML_HIP": "the recipe's backends", "GGML_VULKAN": "the recipe's backends",
    "GGML_HIP_RCCL": "[hip] rccl", "LLAMA_BUILD_TESTS": "[tests] backend_ops", "GGML_CPU_ALL_VARIANTS": "[cpu] variants",
    **{f"GGML_{f}": "[cpu] variants (\"all\", or one level such as \"haswell\")" for f in cpulevels.FEATURES},
}
LAUNCHERS = ("auto", "ccache", "sccache", "none")
# Environment variables of the cascade, each with what it sets.
CUDA_ROOT_ENV = ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME")
ROCM_PATH_ENV = ("ROCM_PATH", "HIP_PATH")
ENGINE_ENV = "ASSEMBLE_CONTAINER_ENGINE"
JOBS_ENV = "CMAKE_BUILD_PARALLEL_LEVEL"     # CMake's own: how many jobs `cmake --build` runs
HOST, CONTAINER, ADOPTED = "host", "container", "adopted"


@dataclass(frozen=True)
class CliOptions:
    """What the command line asked for, already parsed (builder.cli.args): the cascade's last word."""
    source: str | None = None
    mirrors: tuple[str, ...] = ()                 # tried before the recipe's own
    cuda_archs: tuple[CudaArch, ...] = ()
    cuda_root: str | None = None
    hip_target: GfxTarget | None = None
    rocm_path: str | None = None
    defines: tuple[tuple[str, str], ...] = ()
    targets: tuple[str, ...] = ()
    jobs: int | None = None
    launcher: str = "auto"
    container: str | None = None                  # units naming none build in this one; "none": all on the host
    engine: str = "auto"
    patches: tuple[str, ...] = ()                 # opt-in patches
    accept_blackwell_regression: bool = False
    unit_from: tuple[tuple[str, str], ...] = ()   # (unit, folder): built elsewhere, merged as they are
    only_unit: str | None = None
    remote_cache: str | None = None               # the shared compile cache (builder.config.remotecache)


@dataclass(frozen=True)
class Setting:
    """A resolved value and the step of the cascade that gave it."""
    value: Any                        # each field's own type (int jobs, str paths, a RemoteCache, None)
    origin: str                       # "default", "recipe", "CUDAToolkit_ROOT", "--cuda-root", ...

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "from": self.origin}


@dataclass(frozen=True)
class Where:
    """Where a unit is compiled: on this host, in a container image, or not here (a folder built elsewhere)."""
    kind: str                         # host | container | adopted
    image: str | None = None          # containers/<image>.Containerfile
    folder: str | None = None         # the --unit-from folder

    def image_name(self) -> str:
        """A container unit's image (every one names it; the others have none)."""
        assert self.image is not None, f"a {self.kind} unit has no image"
        return self.image

    def folder_name(self) -> str:
        """An adopted unit's --unit-from folder (every one names it; the others have none)."""
        assert self.folder is not None, f"a {self.kind} unit has no folder"
        return self.folder

    def label(self) -> str:
        return {HOST: "host", CONTAINER: f"container {self.image}", ADOPTED: f"built elsewhere ({self.folder})"}[self.kind]


@dataclass(frozen=True)
class Define:
    key: str
    value: str
    origin: str                       # default | backend | targets | recipe | unit | --define


@dataclass(frozen=True)
class UnitConfig:
    name: str
    backends: tuple[str, ...]
    where: Where
    cuda_archs: tuple[CudaArch, ...] = ()
    hip_targets: tuple[GfxTarget, ...] = ()
    defines: tuple[Define, ...] = ()  # one per key, the winner of the cascade
    backend_ops: bool = False         # builds test-backend-ops besides the targets ([tests]; plan adds the target)

    def value(self, key: str) -> str | None:
        return next((d.value for d in self.defines if d.key == key), None)

    def cmake_defines(self) -> tuple[tuple[str, str], ...]:
        return tuple((d.key, d.value) for d in self.defines)

    def abi(self) -> dict[str, Any]:
        return {k: self.value(k) for k in ABI_DEFINES}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "backends": list(self.backends), "where": self.where.label(),
                "cuda_archs": [str(a) for a in self.cuda_archs], "hip_targets": [str(t) for t in self.hip_targets],
                "backend_ops": self.backend_ops, "defines": {d.key: d.value for d in self.defines}}


@dataclass(frozen=True)
class BuildConfig:
    recipe: Recipe                    # with the command line's patches and mirrors applied
    units: tuple[UnitConfig, ...]
    targets: tuple[str, ...]          # build targets
    jobs: Setting
    launcher: Setting
    engine: Setting
    places: ToolPlaces                # where the host's toolkits and compilers are looked for
    source: str | None = None
    accept_blackwell_regression: bool = False
    only_unit: str | None = None
    remote_cache: Setting = Setting(None, "default")   # value: a remotecache.RemoteCache (str(): redacted)

    def unit(self, name: str) -> UnitConfig:
        return next(u for u in self.units if u.name == name)

    def wanted(self) -> tuple[UnitConfig, ...]:
        """The units this run builds or merges (--only-unit: that one alone)."""
        return tuple(u for u in self.units if self.only_unit in (None, u.name))

    def split(self) -> bool:
        """Host units that need different GPU toolkits: built on different machines (--only-unit there,
        --unit-from here), as `matrix` splits the jobs and `doctor` suggests."""
        host = [u for u in self.units if u.where.kind != CONTAINER and {"cuda", "hip"} & set(u.backends)]
        return len(host) >= 2 and len({b for u in host for b in u.backends} & {"cuda", "hip"}) >= 2

    def cuda_unit(self) -> UnitConfig | None:
        return next((u for u in self.units if "cuda" in u.backends), None)

    def as_dict(self) -> dict[str, Any]:
        """What `show`, `doctor` and `matrix` print and the manifest records: the same values."""
        return {"recipe": self.recipe.name, "sha": self.recipe.pin.sha, "backends": list(self.recipe.backends),
                "targets": list(self.targets), "patches": list(self.recipe.patches_on),
                "accept_blackwell_regression": self.accept_blackwell_regression,
                "jobs": self.jobs.as_dict(), "launcher": self.launcher.as_dict(), "engine": self.engine.as_dict(),
                "remote_cache": {"value": str(self.remote_cache.value) if self.remote_cache.value else None,
                                 "from": self.remote_cache.origin},
                **self.places.as_dict(), "units": [u.as_dict() for u in self.units]}


# --- the cascade ---------------------------------------------------------------------

def resolve(recipe: Recipe, cli: CliOptions = CliOptions(), env: Mapping[str, str] | None = None) -> BuildConfig:
    """Every option of a build, decided once. Raises AssembleError (one line) for a contradiction."""
    env = os.environ if env is None else env
    recipe = with_mirrors(_with_patches(recipe, cli.patches), cli.mirrors)
    _check_defines(recipe, cli)
    _check_unit_names(recipe, cli)
    adopted = dict(cli.unit_from)
    units = tuple(_unit(recipe, u, cli, adopted) for u in recipe.units)
    remote = _first((cli.remote_cache, "--remote-cache"), (env.get(remotecache.ENV) or None, remotecache.ENV),
                    (None, "default"))
    if remote.value:                                  # read once, here: a bad URL is one line before anything runs
        cache = remotecache.parse(str(remote.value), remote.origin)
        if remotecache.read_only(env.get(remotecache.READ_ONLY_ENV, ""), remotecache.READ_ONLY_ENV):
            cache = dataclasses.replace(cache, read_only=True)
        remote = Setting(cache, remote.origin)
    return BuildConfig(
        recipe=recipe, units=units, targets=cli.targets or recipe.targets,
        jobs=_first((cli.jobs, "--jobs"), (_int_env(env, JOBS_ENV), JOBS_ENV), (os.cpu_count() or 2, "default")),
        launcher=Setting(cli.launcher, "--launcher" if cli.launcher != "auto" else "default"),
        engine=_first((cli.engine if cli.engine != "auto" else None, "--engine"), (env.get(ENGINE_ENV), ENGINE_ENV),
                      ("auto", "default")),
        places=resolve_places(cli, env), source=cli.source,
        accept_blackwell_regression=bool(cli.accept_blackwell_regression
                                         or (recipe.cuda is not None and recipe.cuda.accept_blackwell_regression)),
        only_unit=cli.only_unit, remote_cache=remote)


@dataclass(frozen=True)
class ToolPlaces:
    """Where the host's tools are looked for; `doctor` without a recipe resolves only these."""
    cuda_root: Setting                # value None: nvcc on PATH, else /usr/local/cuda
    rocm_path: Setting                # value None: hipconfig, /opt/rocm, /usr
    cc: Setting
    cxx: Setting

    def as_dict(self) -> dict[str, Any]:
        return {"cuda_root": self.cuda_root.as_dict(), "rocm_path": self.rocm_path.as_dict(),
                "cc": self.cc.as_dict(), "cxx": self.cxx.as_dict()}


def resolve_places(cli: CliOptions = CliOptions(), env: Mapping[str, str] | None = None) -> ToolPlaces:
    """The command line, then the tools' own variables (CUDAToolkit_ROOT, ROCM_PATH, CC, ...)."""
    env = os.environ if env is None else env
    return ToolPlaces(
        cuda_root=_first((cli.cuda_root, "--cuda-root"), *((env.get(v), v) for v in CUDA_ROOT_ENV), (None, "default")),
        rocm_path=_first((cli.rocm_path, "--rocm-path"), *((env.get(v), v) for v in ROCM_PATH_ENV), (None, "default")),
        cc=_first((env.get("CC"), "CC"), ("cc", "default")),
        cxx=_first((env.get("CXX"), "CXX"), ("c++", "default")))


def _unit(recipe: Recipe, unit: Unit, cli: CliOptions, adopted: dict[str, str]) -> UnitConfig:
    if unit.name in adopted:
        where = Where(ADOPTED, folder=adopted[unit.name])
    else:
        image = None if cli.container == "none" else (unit.container or cli.container)
        where = Where(CONTAINER, image=image) if image else Where(HOST)
    backends = set(unit.backends)
    cuda = (cli.cuda_archs or (recipe.cuda.architectures if recipe.cuda else ())) if "cuda" in backends else ()
    cuda = tuple(dict.fromkeys(a.as_ggml_builds() for a in cuda))
    hip = (((cli.hip_target,) if cli.hip_target else (recipe.hip.targets if recipe.hip else ())) if "hip" in backends else ())
    cascade: list[Define] = [Define(k, v, "default") for k, v in BASE_DEFINES]
    cascade += [Define(f"GGML_{b.upper()}", "ON" if b in backends else "OFF", "backend") for b in ("cuda", "hip", "vulkan")]
    cascade += _cpu_defines(recipe)
    if cuda:
        cascade.append(Define("CMAKE_CUDA_ARCHITECTURES", ";".join(map(str, cuda)), "targets"))
    if hip:
        gpu = ";".join(map(str, hip))
        cascade += [Define("GPU_TARGETS", gpu, "targets"), Define("AMDGPU_TARGETS", gpu, "targets"),
                    Define("GGML_HIP_RCCL", "ON" if recipe.hip and recipe.hip.rccl else "OFF", "recipe [hip]")]
    backend_ops = recipe.backend_ops_unit() == unit.name
    if backend_ops:                   # upstream's tests folder is configured, and only its one target built
        cascade.append(Define("LLAMA_BUILD_TESTS", "ON", "recipe [tests]"))
    cascade += [Define(k, v, "recipe") for k, v in recipe.defines]
    cascade += [Define(k, v, f"unit {unit.name}") for k, v in unit.defines]
    cascade += [Define(k, v, "--define") for k, v in cli.defines]
    final: dict[str, Define] = {}
    for d in cascade:                 # later steps win; the key keeps its first place in the order
        final[d.key] = d
    if final["GGML_CPU_ALL_VARIANTS"].value == "ON" and final["GGML_BACKEND_DL"].value != "ON":
        raise AssembleError("[cpu] variants = \"all\" needs GGML_BACKEND_DL=ON (ggml picks a variant module at "
                            "run time)", where=f"{recipe.path} ({final['GGML_BACKEND_DL'].origin})",
                            fix='keep GGML_BACKEND_DL=ON, or name one level: [cpu] variants = "haswell"')
    return UnitConfig(unit.name, unit.backends, where, tuple(cuda), tuple(hip), tuple(final.values()), backend_ops)


def _cpu_defines(recipe: Recipe) -> list[Define]:
    """Every instruction-set option set here, explicitly: ggml's own defaults follow the build
    host (GGML_NATIVE) and the environment (SOURCE_DATE_EPOCH turns AVX..F16C off), so a
    default left to ggml would make the same plan compile different code on two machines."""
    if recipe.cpu.variants == cpulevels.ALL:
        return [Define("GGML_CPU_ALL_VARIANTS", "ON", "recipe [cpu]")] + [
            Define(k, v, "recipe [cpu] (each variant sets its own)") for k, v in cpulevels.ALL_VARIANTS_DEFINES]
    chosen = cpulevels.level(recipe.cpu.variants)
    assert chosen is not None, "the recipe's check accepts only known levels"
    return [Define("GGML_CPU_ALL_VARIANTS", "OFF", "recipe [cpu]")] + [
        Define(k, v, f"recipe [cpu] level {chosen.name}") for k, v in chosen.defines()]


def _first(*candidates: tuple[object, str]) -> Setting:
    for value, origin in candidates:
        if value not in (None, ""):
            return Setting(value, origin)
    return Setting(None, "default")


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw in (None, ""):
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise AssembleError(f"{name}={raw!r} is not a positive whole number", where=name,
                            fix=f"unset it, or set e.g. {name}=8")
    return int(raw)


def _check_defines(recipe: Recipe, cli: CliOptions) -> None:
    sources = [(f"{recipe.path}: cmake.defines", recipe.defines)]
    sources += [(f"{recipe.path}: units.{u.name}.defines", u.defines) for u in recipe.units]
    sources.append(("--define", cli.defines))
    for where, defines in sources:
        for key, _ in defines:
            if key in OWNED_DEFINES:
                raise AssembleError(f"{key} is set by assemble from one place, not as a define", where=where,
                                    fix=f"use {OWNED_DEFINES[key]}")


def _check_unit_names(recipe: Recipe, cli: CliOptions) -> None:
    known = [u.name for u in recipe.units]
    named = [(n, "--unit-from") for n, _ in cli.unit_from] + ([(cli.only_unit, "--only-unit")] if cli.only_unit else [])
    for name, flag in named:
        if name not in known:
            raise AssembleError(f"recipe {recipe.name} has no unit {name!r}", where=f"{flag} ({recipe.path})",
                                fix=f"use one of: {', '.join(known)}")
    if cli.only_unit and cli.only_unit in dict(cli.unit_from):
        raise AssembleError(f"unit {cli.only_unit} is both to be built (--only-unit) and taken from a folder "
                            "(--unit-from)", where="--only-unit", fix="drop one of the two")


def _with_patches(recipe: Recipe, patches: tuple[str, ...]) -> Recipe:
    if not patches:
        return recipe
    return dataclasses.replace(recipe, patches_on=tuple(dict.fromkeys(recipe.patches_on + patches)))


def with_mirrors(recipe: Recipe, extra: tuple[str, ...]) -> Recipe:
    """The recipe with command-line mirrors put in front of its own (a URL: git; else a local repository)."""
    if not extra:
        return recipe
    mirrors = tuple(Mirror(kind="git", url=m) if "://" in m or m.startswith("git@") else Mirror(kind="local", path=m)
                    for m in extra)
    return dataclasses.replace(recipe, pin=dataclasses.replace(recipe.pin, mirrors=mirrors + recipe.pin.mirrors))
