"""The environment CMake, Ninja and the compilers run in: built from a short allow-list, never
the caller's whole environment.

Many variables change what a build compiles without showing in its command line: ggml turns
its native-CPU default off when SOURCE_DATE_EPOCH is set, GCC reads CPATH and LIBRARY_PATH,
nvcc appends NVCC_APPEND_FLAGS, CMake reads CFLAGS, CC and CMAKE_BUILD_TYPE. A release
pipeline sets some of these for other tools, so the same plan would ship different code on
two machines. Here each variable is either
  - passed, because it only says where things are or how to talk (PATH, HOME, the compiler
    cache's own settings),
  - passed and part of the build key, because it can change which tool libraries run
    (LD_LIBRARY_PATH, PKG_CONFIG_PATH, VULKAN_SDK),
  - or dropped. The dropped ones known to change results are named in the log and in the
    manifest, so a user who set CFLAGS learns it had no effect and where flags go instead.
Values of passed variables are never recorded: they may hold credentials (a remote cache's).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PASSED = ("PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")
PASSED_PREFIXES = ("CCACHE_", "SCCACHE_")        # the compiler cache's own settings: where hits come from
KEYED = ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "VULKAN_SDK")
# Known to change the result when set, and where their job is done instead.
SCRUBBED = {
    "SOURCE_DATE_EPOCH": "ggml reads it as 'no native CPU tuning'; the plan sets every instruction-set option",
    "CC": "the plan names the C compiler (CMAKE_C_COMPILER, resolved from CC once)",
    "CXX": "the plan names the C++ compiler (CMAKE_CXX_COMPILER, resolved from CXX once)",
    "CFLAGS": "use [cmake.defines] CMAKE_C_FLAGS or --define", "CXXFLAGS": "use [cmake.defines] CMAKE_CXX_FLAGS",
    "CPPFLAGS": "use [cmake.defines] CMAKE_C_FLAGS / CMAKE_CXX_FLAGS", "LDFLAGS": "use [cmake.defines] "
    "CMAKE_SHARED_LINKER_FLAGS / CMAKE_EXE_LINKER_FLAGS", "CUDAFLAGS": "use [cmake.defines] CMAKE_CUDA_FLAGS",
    "HIPFLAGS": "use [cmake.defines] CMAKE_HIP_FLAGS", "CUDACXX": "--cuda-root names the toolkit",
    "CUDAHOSTCXX": "use [cmake.defines] CMAKE_CUDA_HOST_COMPILER", "HIPCXX": "--rocm-path names ROCm",
    "CUDA_PATH": "--cuda-root", "CUDA_HOME": "--cuda-root", "CUDAToolkit_ROOT": "--cuda-root (read once, "
    "passed as a define)", "ROCM_PATH": "--rocm-path (read once, set by the plan)", "HIP_PATH": "--rocm-path",
    "HIP_PLATFORM": "the plan builds for AMD", "HIP_CLANG_PATH": "--rocm-path", "HIP_DEVICE_LIB_PATH": "--rocm-path",
    "DEVICE_LIB_PATH": "--rocm-path", "CPATH": "use [cmake.defines]", "C_INCLUDE_PATH": "use [cmake.defines]",
    "CPLUS_INCLUDE_PATH": "use [cmake.defines]", "LIBRARY_PATH": "use [cmake.defines]",
    "LD_RUN_PATH": "the bundler sets every RPATH", "GCC_EXEC_PREFIX": "the plan names the compiler",
    "COMPILER_PATH": "the plan names the compiler", "NVCC_PREPEND_FLAGS": "use [cmake.defines] CMAKE_CUDA_FLAGS",
    "NVCC_APPEND_FLAGS": "use [cmake.defines] CMAKE_CUDA_FLAGS", "NVCC_CCBIN": "use [cmake.defines] "
    "CMAKE_CUDA_HOST_COMPILER", "MAKEFLAGS": "--jobs", "GIT_DIR": "the build-info names the pinned commit",
}
SCRUBBED_PREFIXES = {"CMAKE_": "CMake reads CMAKE_BUILD_TYPE, CMAKE_TOOLCHAIN_FILE, ... from the environment: "
                              "use [cmake.defines] or --define; --jobs sets the job count"}


@dataclass(frozen=True)
class BuildEnv:
    passed: tuple[tuple[str, str], ...]     # what the tools see (before the plan's own variables)
    keyed: tuple[tuple[str, str], ...]      # the passed ones that are part of the build key
    scrubbed: tuple[str, ...]               # set by the caller, known to change results, not passed

    def mapping(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**dict(self.passed), **dict(extra or {})}

    def as_dict(self) -> dict[str, Any]:
        """For the manifest: names, and values only where they are part of the key."""
        return {"passed": sorted(k for k, _ in self.passed), "keyed": dict(self.keyed),
                "scrubbed": list(self.scrubbed)}

    def notice(self) -> tuple[str, bool] | None:
        """(line for the log, whether it deserves a warning): SOURCE_DATE_EPOCH alone is expected in a
        release pipeline (assemble package still uses it), anything else was probably meant to work."""
        if not self.scrubbed:
            return None
        line = (f"not passed to the build (they would change what is compiled): {', '.join(self.scrubbed)}; "
                "flags go in [cmake.defines] or --define")
        return line, any(k != "SOURCE_DATE_EPOCH" for k in self.scrubbed)


def why_scrubbed(name: str) -> str | None:
    if name in SCRUBBED:
        return SCRUBBED[name]
    return next((why for prefix, why in SCRUBBED_PREFIXES.items() if name.startswith(prefix)), None)


def build_env(environ: Mapping[str, str] | None = None) -> BuildEnv:
    environ = os.environ if environ is None else environ
    passed = [(k, v) for k, v in sorted(environ.items())
              if k in PASSED or k in KEYED or k.startswith(PASSED_PREFIXES)]
    keyed = tuple((k, v) for k, v in passed if k in KEYED)
    scrubbed = tuple(sorted(k for k in environ if why_scrubbed(k) and k not in KEYED))
    return BuildEnv(tuple(passed), keyed, scrubbed)
