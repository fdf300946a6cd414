"""Plan one build unit: its resolved configuration plus the toolchain it builds with, rendered into
the exact CMake command lines. Pure: it reads a UnitConfig and a Toolchain (found once,
elsewhere) and writes nothing, so `assemble show` prints exactly what `build` runs.

A unit's defines say *what* to build (builder.config.options resolved them); its tool defines
say *where the tools are*: this host's paths, or the image's when the unit builds in a
container. Both command lines are rendered from that, never parsed back.

On the host, cmake, ninja and the compiler cache run from their copies in the cache, named by
name, version and digest (builder.toolchain.toolstore), and the build key names what each tool
is, never the folder it was installed in: a second virtual environment with the same versions
plans the same command lines, the same key and the same build folder, so its build is a no-op.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.units.environment import BuildEnv, build_env
from builder.config.options import CONTAINER, BuildConfig, UnitConfig
from builder.config.remotecache import RemoteCache
from builder.paths import cache_dir
from builder.proc import command_line
from builder.runtime.layout import BACKEND_OPS, LINK_RPATH
from builder.toolchain import toolstore
from builder.toolchain.detect import Tool, Toolchain
from builder.toolchain.toolstore import StoredTool

# Where the build images keep their tools (containers/cuda12.8-build.Containerfile).
IMAGE_CUDA_ROOT = "/usr/local/cuda"
IMAGE_TOOLS = {"cmake": "cmake", "ninja": "ninja", "launcher": "ccache"}
# What this host could not give (a tool it lacks, a tree not fetched yet) stands in a plan as a
# word in angle brackets: "<no HIP compiler found>". A line holding one is not runnable as shown.
PLACEHOLDER = re.compile(r"<[^<>]+>")
# Every file a unit links carries its final DT_RPATH (layout.LINK_RPATH), as DT_RPATH rather than the
# DT_RUNPATH most toolchains write by default (LD_LIBRARY_PATH is searched before a RUNPATH): the
# bundler then copies our files byte for byte, build-id and all. The build tree's programs look in
# build/lib, which does not exist: nothing runs them there. (`build` links ELF only; the Windows
# runtimes are cross-built elsewhere, scripts/mingw-build-in-chroot.sh, and PE has no RPATH.)
NO_NEW_DTAGS = "-Wl,--disable-new-dtags"
LINKER_FLAGS = ("CMAKE_EXE_LINKER_FLAGS", "CMAKE_SHARED_LINKER_FLAGS", "CMAKE_MODULE_LINKER_FLAGS")
RECIPE_RPATH = ("CMAKE_INSTALL_RPATH", "CMAKE_BUILD_WITH_INSTALL_RPATH", "CMAKE_SKIP_RPATH", "CMAKE_SKIP_BUILD_RPATH")


@dataclass(frozen=True)
class UnitPlan:
    recipe: str
    unit: UnitConfig
    sha: str | None
    source_dir: Path
    build_dir: Path
    defines: tuple[tuple[str, str], ...]        # what to build, then where its tools are (later wins)
    targets: tuple[str, ...]
    jobs: int
    cmake: str                                  # the cmake that runs it ("cmake" inside an image)
    env: tuple[tuple[str, str], ...] = ()       # ROCM_PATH / HIP_PATH for a HIP unit
    toolchain: dict[str, Any] = field(default_factory=dict)   # Toolchain.record(): for the manifest
    key: str = ""
    tree: str = ""                              # the patch set applied to the source ("" = pristine)
    environment: BuildEnv = field(default_factory=lambda: BuildEnv((), (), ()))  # what CMake and the compilers see of ours (host units)
    launcher: str | None = None                 # "ccache" | "sccache" | None: what fronts the compilers
    remote_cache: RemoteCache | None = None     # the shared store (not in the key: it changes no output)
    stored: tuple[StoredTool, ...] = ()         # the tool copies the command lines run (made before the build)

    @property
    def configure(self) -> tuple[str, ...]:
        return (self.cmake, "-S", str(self.source_dir), "-B", str(self.build_dir), "-G", "Ninja",
                *(f"-D{k}={v}" for k, v in self.defines))

    @property
    def build(self) -> tuple[str, ...]:
        # Backend modules need no target of their own: under GGML_BACKEND_DL ggml depends on each.
        return (self.cmake, "--build", str(self.build_dir), "-j", str(self.jobs), "--target", *self.targets)

    def placeholders(self) -> tuple[str, ...]:
        """The command-line words (and environment entries) that hold a placeholder, in order."""
        words = (*self.configure, *self.build, *(f"{k}={v}" for k, v in self.env))
        return tuple(dict.fromkeys(w for w in words if PLACEHOLDER.search(w)))

    @property
    def in_container(self) -> bool:
        return self.unit.where.kind == CONTAINER

    def lines(self) -> tuple[str, str]:
        return command_line(self.configure), command_line(self.build)


def tool_defines(unit: UnitConfig, tc: Toolchain) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(defines, environment) that point CMake at the toolchain: the host's paths, or the image's."""
    image = unit.where.kind == CONTAINER
    defines: list[tuple[str, str]] = [("CMAKE_MAKE_PROGRAM", IMAGE_TOOLS["ninja"] if image else
                                       toolstore.runs_as(tc.ninja, "ninja"))]
    if not image:   # named, never left to CC/CXX in the environment (the build runs without them)
        defines += [("CMAKE_C_COMPILER", _path(tc.cc, "cc")), ("CMAKE_CXX_COMPILER", _path(tc.cxx, "c++"))]
    env: list[tuple[str, str]] = []
    if "cuda" in unit.backends:
        root = IMAGE_CUDA_ROOT if image else (tc.cuda.root if tc.cuda else "<no CUDA toolkit found>")
        nvcc = f"{IMAGE_CUDA_ROOT}/bin/nvcc" if image else (tc.cuda.nvcc if tc.cuda else "<nvcc not found>")
        defines += [("CMAKE_CUDA_COMPILER", nvcc), ("CUDAToolkit_ROOT", root)]
    if "hip" in unit.backends:
        rocm = tc.rocm
        root = rocm.root if rocm else "<no ROCm found>"
        defines += [("CMAKE_HIP_COMPILER", (rocm.hip_clang if rocm else None) or "<no HIP compiler found>"),
                    ("CMAKE_PREFIX_PATH", root)]
        if rocm and rocm.hip_flags():
            defines.append(("CMAKE_HIP_FLAGS", " ".join(rocm.hip_flags())))
        env += [("ROCM_PATH", root), ("HIP_PATH", root)]
    launcher = IMAGE_TOOLS["launcher"] if image and tc.launcher_choice != "none" else (
        toolstore.runs_as(tc.launcher, "launcher") if tc.launcher and not image else None)
    if launcher:
        langs = ("C", "CXX") + (("CUDA",) if "cuda" in unit.backends else ()) + (("HIP",) if "hip" in unit.backends else ())
        defines += [(f"CMAKE_{lang}_COMPILER_LAUNCHER", launcher) for lang in langs]
    return tuple(defines), tuple(env)


def rpath_defines(defines: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The defines that link LINK_RPATH as DT_RPATH; a recipe's own linker flags are kept, ours after.
    None when the recipe chose an RPATH itself (the tests' stand-in for upstream's release build links
    RUNPATH=$ORIGIN that way): it is linked as the recipe says, and the bundler edits it as before."""
    if any(k in defines for k in RECIPE_RPATH):
        return ()
    out = [("CMAKE_BUILD_WITH_INSTALL_RPATH", "ON"), ("CMAKE_INSTALL_RPATH", LINK_RPATH)]
    for key in LINKER_FLAGS:
        flags = defines.get(key, "")
        out.append((key, flags if NO_NEW_DTAGS in flags.split() else f"{flags} {NO_NEW_DTAGS}".strip()))
    return tuple(out)


def _path(tool: Tool | None, fallback: str) -> str:
    return tool.path if tool is not None else f"<{fallback} not found>"


def plan_unit(config: BuildConfig, unit: UnitConfig, tc: Toolchain, source_dir: Path, sha: str | None,
              tree: str = "", environ: Mapping[str, str] | None = None) -> UnitPlan:
    """Everything needed to configure and build one unit; reads only, writes nothing.
    environ: the caller's environment (default os.environ), of which the plan keeps only what
    builder.units.environment allows; a container unit sees none of it."""
    tools, env = tool_defines(unit, tc)
    environment = BuildEnv((), (), ()) if unit.where.kind == CONTAINER else build_env(environ)
    merged = dict(unit.cmake_defines())
    merged.update(rpath_defines(merged))
    merged.update(tools)                 # a toolchain path never loses to a recipe define of the same name
    defines = tuple(merged.items())
    image = unit.where.kind == CONTAINER
    cmake = IMAGE_TOOLS["cmake"] if image else toolstore.runs_as(tc.cmake, "cmake")
    stored = () if image else tuple(s for s in map(toolstore.stored, (tc.cmake, tc.ninja, tc.launcher)) if s)
    # The key names what the tools are (versions, digests, the compilers' targets) and the paths the
    # command lines run (the store's copies: a function of what they are; the compilers; a tool that
    # could not be copied, where it was found). The manifest's toolchain record says where they came from.
    key = hashlib.sha256(json.dumps({"recipe": config.recipe.name, "unit": unit.name, "sha": sha, "tree": tree,
                                     "source": str(source_dir),  # two checkouts at one sha: two build folders
                                     "where": unit.where.label() if image else "host",
                                     "defines": defines, "cmake": cmake, "env": env, "tools": tc.identity(),
                                     "environment": environment.keyed},
                                    sort_keys=True).encode()).hexdigest()[:12]
    # Beside a prepared tree (<cache>/trees/<id>/src) the build folder is <id>/build/<name>: the
    # same relative path to the sources for every tree variant, so ccache hits across them.
    name = f"{config.recipe.name}-{unit.name}-{(sha or 'local')[:12]}-{key}"
    trees = cache_dir() / "trees"
    beside = source_dir.name == "src" and source_dir.parent.parent == trees
    build_dir = (source_dir.parent / "build" / name) if beside else (cache_dir() / "build" / name)
    return UnitPlan(recipe=config.recipe.name, unit=unit, sha=sha, source_dir=source_dir, build_dir=build_dir,
                    defines=defines, targets=tuple(config.targets) + ((BACKEND_OPS,) if unit.backend_ops else ()), jobs=int(config.jobs.value), cmake=cmake,
                    env=env, toolchain=tc.record(), key=key, tree=tree, environment=environment,
                    launcher=launcher_name(unit, tc), remote_cache=config.remote_cache.value, stored=stored)


def launcher_name(unit: UnitConfig, tc: Toolchain) -> str | None:
    """Which compiler cache fronts this unit's compilers: the image's ccache, or the host's choice."""
    if unit.where.kind == CONTAINER:
        return IMAGE_TOOLS["launcher"] if tc.launcher_choice != "none" else None
    return tc.launcher.name if tc.launcher else None
