"""What a toolchain allows a unit to build, declared once.

Each rule is data in the manner of Spack's `conflicts(when=..., msg=...)`: the topic it
belongs to (a row of `assemble doctor`), how bad it is (REFUSE: the build stops before
CMake; SLOWER: it builds, slower), when it fires, and the words: what was found, what it
means, how to fix it. One evaluator runs them; `build` raises the first refusal and
warns about the rest, `doctor` shows every finding as a row with the same words. The two
cannot disagree because there is nothing else to consult.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from typing import Any

from builder.config.options import HOST, BuildConfig, UnitConfig
from builder.config.recipe import Recipe
from builder.config.targets import CudaArch, GfxTarget
from builder.config.versions import parse_constraint, satisfies
from builder.errors import AssembleError
from builder.toolchain import hints
from builder.config.versions import version_tuple
from builder.toolchain.detect import (CudaToolkit, Distro, GlslcProbe, RocmInstall, Tool, Toolchain, VulkanSdk,
                                      kernel_archs, rocm_searched)

REFUSE, SLOWER, OK = "refuse", "slower", "ok"
T = TypeVar("T")

# --- facts the rules compare against, each with its source ------------------------------
MIN_ROCM = (6, 1)            # ggml-hip/CMakeLists.txt: FATAL_ERROR "At least ROCM/HIP V6.1 is required"
# Cards that need a newer ROCm than ggml's floor: the first release AMD supports each arch with.
# RDNA4 (Radeon RX 9070/9070 XT = gfx1201, RX 9060 XT = gfx1200): ROCm 6.4.1's release notes and
# AMD's Radeon compatibility matrix add them; no earlier ROCm ships their rocBLAS/hipBLASLt kernels.
ROCM_SINCE = {"gfx1200": (6, 4), "gfx1201": (6, 4)}
CMAKE_MIN_HIP = (3, 21)      # ggml-hip/CMakeLists.txt: cmake_minimum_required(VERSION 3.21)
MIN_PATCHELF = (0, 19, 1)    # 0.17.x/0.18.0 corrupt CUDA libraries (NixOS/patchelf #446, #482, #528)
# Consumer/workstation Blackwell (RTX 50xx, RTX PRO 6000) and DGX Spark (GB10): the chips that
# inherit the Ada-tuned flash-attention rule in ggml-cuda/fattn.cu.
BLACKWELL_ARCHS = ("120", "121")
REGRESSION_SINCE = (13, 0)
BLACKWELL_PATCH = "cuda-fa-blackwell-exempt"   # patches/: exempts Blackwell from that rule (opt-in)
FAMILY_SUFFIX_SINCE = (12, 9)                  # "120f" targets first appeared in CUDA 12.9
# The first CUDA release whose nvcc targets each architecture newer than Hopper (its release notes;
# older ones are in every toolkit the rules accept). A number missing here: Blackwell's 12.8 at least.
CUDA_SINCE = {100: (12, 8), 101: (12, 8), 103: (12, 9), 110: (13, 0), 120: (12, 8), 121: (12, 9)}
# ggml-cuda/CMakeLists.txt: the "f" suffix needs CMake >= 3.31.8 (< 4.0) or >= 4.0.2
CMAKE_FAMILY_OK = (((3, 31, 8), (4, 0)), ((4, 0, 2), (999,)))
# ggml-vulkan.cpp at the pinned commit uses these extensions' types with no #if guard, so a
# vulkan_core.h without them fails to compile (Debian 12's lacks the first: "'LayerSettingEXT' is
# not a member of 'vk'"). Known good: Debian 13's (the versions live in hints, with the fix).
VULKAN_REQUIRED_EXTENSIONS = ("VK_EXT_layer_settings", "VK_EXT_pipeline_robustness", "VK_EXT_device_fault")
VULKAN_TESTED = hints.DEBIAN13_VULKAN
# What a build loses when glslc lacks an extension ggml probes for (ggml keeps building).
GLSLC_MEANING = {
    "GL_KHR_cooperative_matrix": "cooperative matrix (matrix cores of AMD RDNA3+, Intel Arc, NVIDIA: prompt processing)",
    "GL_NV_cooperative_matrix2": "coopmat2 (NVIDIA's fastest matmul and flash-attention shaders)",
    "GL_NV_cooperative_matrix_decode_vector": "coopmat2 vector decode",
    "GL_EXT_integer_dot_product": "integer dot product (quantized matmuls)",
    "GL_EXT_bfloat16": "bf16",
    "GL_EXT_float_e2m1": "FP4 (e2m1)",
    "GL_EXT_float_e4m3": "FP8 (e4m3)",
}
SHORT_EXT = {"GL_KHR_cooperative_matrix": "coopmat", "GL_NV_cooperative_matrix2": "coopmat2",
             "GL_NV_cooperative_matrix_decode_vector": "coopmat2-decode", "GL_EXT_integer_dot_product": "int-dot",
             "GL_EXT_bfloat16": "bf16", "GL_EXT_float_e2m1": "fp4", "GL_EXT_float_e4m3": "fp8"}
ACCEPTED, PATCHED, NOT_APPLICABLE = "accepted", "patched", "not-applicable"


# --- what a rule sees -------------------------------------------------------------------

@dataclass(frozen=True)
class Context:
    """One unit, the toolchain it would build with, and the recipe settings rules read."""
    unit: UnitConfig
    toolchain: Toolchain
    recipe: Recipe
    accept_regression: bool = False
    blackwell_patch: str | None = "not asked for"   # None: the build applies the Blackwell patch; else why not
    rocm_path: str | None = None                    # the resolved --rocm-path/ROCM_PATH/HIP_PATH, for messages
    rocm_origin: str = "--rocm-path"                # which of them gave it
    distro: Distro = field(default_factory=lambda: Distro(""))  # for install hints in this distribution's words
    provisioned: tuple[tuple[str, str], ...] = ()   # (version, root) of CUDA toolkits `assemble toolchain` laid out

    def hint(self, component: str) -> str:
        vulkan = self.toolchain.vulkan
        return hints.hint(component, self.distro, self.toolchain.cuda, vulkan.glslc if vulkan else None)

    # The toolkit a rule reads. Every rule that reads one sits under a topic shown only when it was
    # found, or after the rule that refuses its absence (the evaluator stops at the first that fires).
    @property
    def cuda(self) -> CudaToolkit:
        assert self.toolchain.cuda is not None, "a CUDA rule ran without a CUDA toolkit"
        return self.toolchain.cuda

    @property
    def rocm(self) -> RocmInstall:
        assert self.toolchain.rocm is not None, "a ROCm rule ran without a ROCm"
        return self.toolchain.rocm

    @property
    def vulkan(self) -> VulkanSdk:
        assert self.toolchain.vulkan is not None, "a Vulkan rule ran without a Vulkan SDK"
        return self.toolchain.vulkan

    def tool(self, name: str) -> Tool:
        """A build tool (cmake, patchelf) a rule reads after the missing-tools rule or its guard."""
        found: Tool | None = getattr(self.toolchain, name)
        assert found is not None, f"a rule read {name}, which was not found"
        return found

    @property
    def glslc(self) -> GlslcProbe:
        assert self.toolchain.glslc is not None, "a glslc rule ran without a probe"
        return self.toolchain.glslc

    @property
    def glslc_tool(self) -> Tool:
        assert self.vulkan.glslc is not None, "a glslc rule ran without glslc"
        return self.vulkan.glslc

    @property
    def rocm_version(self) -> str:
        assert self.rocm.version is not None, "a ROCm version rule ran before the unknown-version rule"
        return self.rocm.version

    @property
    def cuda_constraint(self) -> str | None:
        """The recipe's [cuda] toolkit constraint, if any."""
        return self.recipe.cuda_toolkit

    @property
    def multi_arch_risk(self) -> str | None:
        return self.recipe.hip.multi_arch_risk if self.recipe.hip else None

    @property
    def archs(self) -> tuple[CudaArch, ...]:
        return self.unit.cuda_archs

    @property
    def targets(self) -> tuple[GfxTarget, ...]:
        return self.unit.hip_targets

    @property
    def blackwell(self) -> tuple[CudaArch, ...]:
        return blackwell(self.archs)

    @property
    def regression(self) -> bool:
        return self.toolchain.cuda is not None and regression_applies(self.cuda.version, self.archs)

    def cuda_label(self) -> str:
        return f"CUDA {self.cuda.version} at {self.cuda.root}"

    def rocm_label(self) -> str:
        return f"ROCm {self.rocm.version} at {self.rocm.root} (version from {self.rocm.version_source})"


@dataclass(frozen=True)
class Rule:
    level: str                                  # REFUSE | SLOWER
    when: Callable[[Context], bool]
    found: Callable[[Context], str]             # what was found (doctor's row)
    means: Callable[[Context], str]             # why it matters: the build's error, doctor's "means"
    fix: Callable[[Context], str]


@dataclass(frozen=True)
class Topic:
    name: str                                   # the doctor row: "CUDA toolkit", "Blackwell", ...
    backend: str                                # cuda | hip | vulkan | build
    shown: Callable[[Context], bool]            # does it concern this unit (with this toolchain)?
    ok: Callable[[Context], str]                # what doctor says when no rule fires
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Finding:
    topic: str
    level: str                                  # refuse | slower | ok
    found: str
    means: str = ""
    fix: str = ""
    backend: str = "build"                      # the topic's: cuda | hip | vulkan | build

    def error(self, where: str) -> AssembleError:
        return AssembleError(self.means, where=where, fix=self.fix)


def _f(value: T) -> Callable[[Context], T]:
    return lambda c: value


# --- CUDA -------------------------------------------------------------------------------

def blackwell_patch_state(applied: Sequence[str], skipped: Sequence[tuple[str, str]]) -> str | None:
    """None when the Blackwell patch is applied, else why not (the patches' own words)."""
    return None if BLACKWELL_PATCH in applied else dict(skipped).get(BLACKWELL_PATCH, "not shipped")


def blackwell(archs: Sequence[CudaArch]) -> tuple[CudaArch, ...]:
    return tuple(a for a in archs if a.base in BLACKWELL_ARCHS)


def regression_applies(toolkit_version: str, archs: Sequence[CudaArch]) -> bool:
    """True when this toolkit + these targets hit the Blackwell long-context slowdown."""
    return version_tuple(toolkit_version)[:2] >= REGRESSION_SINCE and bool(blackwell(archs))


def ways_out() -> str:
    """The three ways past the Blackwell refusal, plus the explicit acceptance."""
    return ("pick one: (1) build CUDA with 12.8 -- `assemble toolchain cuda 12.8.1` then --cuda-root ROOT, "
            "or the container recipes cuda128-vulkan / rocm-cuda128 (or --container cuda12.8-build); "
            f"(2) apply the patch {BLACKWELL_PATCH} (--patch {BLACKWELL_PATCH}, or [patches] enable in the recipe; it "
            "exempts Blackwell from the Ada-tuned flash-attention rule; recovers generation, not prefill); (3) drive "
            "that card with Vulkan (recipe vulkan or cuda-vulkan with the card on Vulkan0); or accept the slowdown with "
            "--accept-blackwell-regression / [cuda] accept_blackwell_regression = true (recorded in the manifest)")


_BETTER = "a CUDA 12.8 build is better (recipes cuda128-vulkan / rocm-cuda128, or `assemble toolchain cuda 12.8.1`)"


def _constraint_fix(c: Context) -> str:
    cached = [root for version, root in c.provisioned if satisfies(version, c.cuda_constraint or "")]
    if cached:
        return f"pass --cuda-root {cached[0]} (laid out by `assemble toolchain cuda`)"
    return ("run `assemble toolchain cuda VERSION` for a matching version and pass --cuda-root ROOT, or build the "
            "unit in a container (--container cuda12.8-build)")


def cuda_needed(archs: Sequence[CudaArch]) -> tuple[int, int] | None:
    """The oldest CUDA that can target every one of archs (None: any toolkit)."""
    need = [CUDA_SINCE.get(a.number, (12, 8)) for a in archs if a.number >= 100]
    need += [FAMILY_SUFFIX_SINCE for a in archs if a.suffix == "f"]
    return max(need) if need else None


def runner_cuda(archs: Sequence[CudaArch], constraint: str | None, patched: bool, accepted: bool
                ) -> tuple[str, str]:
    """(version constraint, why) a runner's CUDA toolkit must meet to build these archs, by the
    rules `build` applies: the recipe's constraint or the oldest toolkit that targets every arch,
    and below 13 when a Blackwell arch is in the list unless the patch or the slowdown is opted in
    (the refusal above). `assemble matrix` prints it for each job."""
    need = cuda_needed(archs)
    spec = constraint or (f">={need[0]}.{need[1]}" if need else "")
    bw = blackwell(archs)
    if not bw or patched or accepted:
        return spec or "any", ""
    below = f"<{REGRESSION_SINCE[0]}"
    if spec and any(op in ("<", "<=", "==") and version_tuple(".".join(map(str, v)))[:2] < REGRESSION_SINCE
                    for op, v in parse_constraint(spec)):
        return spec, ""                      # the recipe already keeps it below 13
    return (f"{spec},{below}" if spec else below), (
        f"for {', '.join(f'sm_{a.base}' for a in bw)} CUDA >= {'.'.join(map(str, REGRESSION_SINCE))} is refused: it "
        f"loses 50-80% of generation past 8k context; CUDA 13 only with the patch {BLACKWELL_PATCH} enabled or "
        "the regression accepted")


def _unsupported(c: Context) -> list[CudaArch]:
    known = {a.base for a in c.cuda.archs}
    return [a for a in c.archs if a.base not in known]


def _family_too_old(c: Context) -> list[CudaArch]:
    return [a for a in c.archs if a.suffix == "f"] if version_tuple(c.cuda.version)[:2] < FAMILY_SUFFIX_SINCE else []


def _cmake_rejects_family(c: Context) -> bool:
    if not any(a.suffix == "f" for a in c.archs) or c.toolchain.cmake is None or c.toolchain.where != HOST:
        return False
    v = version_tuple(c.toolchain.cmake.version)
    return not any(lo <= v < hi for lo, hi in CMAKE_FAMILY_OK)


def _unsupported_means(c: Context) -> str:
    bad = _unsupported(c)
    known = {a.base for a in c.cuda.archs}
    newest = max(known, key=int) if known else "none"
    return f"{c.cuda_label()} cannot target {', '.join('sm_' + a.base for a in bad)} (newest it knows: sm_{newest})"


def _unsupported_fix(c: Context) -> str:
    since = {f"sm_{a.base}": v for a in _unsupported(c) if (v := cuda_needed([a]))}
    hint = "".join(f"{name} needs CUDA >= {v[0]}.{v[1]}; " for name, v in since.items())
    return (f"{hint}use a toolkit that lists them in `nvcc --list-gpu-arch`, or drop them from [cuda] architectures"
            + (f" ({c.hint('cuda')})" if c.hint("cuda") else ""))


def _bw(c: Context) -> str:
    return "/".join(f"sm_{a.base}" for a in c.blackwell)


CUDA_TOPICS = (
    Topic("CUDA toolkit", "cuda", _f(True), lambda c: c.cuda_label(), (
        Rule(REFUSE, lambda c: c.toolchain.cuda is None,
             _f("no nvcc"),
             _f("no CUDA toolkit found (nvcc): the CUDA backend cannot build"),
             lambda c: c.hint("cuda") or "install one, run `assemble toolchain cuda 12.8.1` and pass --cuda-root ROOT, "
                                         "or set CUDAToolkit_ROOT"),
        Rule(REFUSE, lambda c: bool(c.cuda_constraint) and not satisfies(c.cuda.version, c.cuda_constraint or ""),
             lambda c: c.cuda_label(),
             lambda c: f"{c.cuda_label()} does not satisfy the recipe's toolkit = {c.cuda_constraint!r}",
             _constraint_fix),
    )),
    Topic("CUDA archs", "cuda", lambda c: c.toolchain.cuda is not None,
          lambda c: f"{' '.join(map(str, c.archs))}: nvcc can target every one", (
        Rule(REFUSE, lambda c: not c.archs, _f("none"), _f("no CUDA architecture requested"),
             _f('list them in [cuda] architectures, e.g. ["89", "120"]')),
        Rule(REFUSE, lambda c: not c.cuda.archs,
             _f("nvcc lists none"), lambda c: f"{c.cuda_label()}: `nvcc --list-gpu-arch` named no architecture",
             _f("check that this nvcc runs (it may be a broken or partial toolkit)")),
        Rule(REFUSE, lambda c: bool(_unsupported(c)),
             lambda c: f"nvcc lacks {', '.join('sm_' + a.base for a in _unsupported(c))}",
             _unsupported_means, _unsupported_fix),
        Rule(REFUSE, lambda c: bool(_family_too_old(c)),
             lambda c: " ".join(map(str, _family_too_old(c))),
             lambda c: f"{c.cuda_label()} has no family-specific target {str(_family_too_old(c)[0])!r} "
                       "(CUDA >= 12.9 does)",
             lambda c: f"use {_family_too_old(c)[0].base} or {_family_too_old(c)[0].base}a instead"),
        Rule(REFUSE, _cmake_rejects_family,
             lambda c: f"{' '.join(str(a) for a in c.archs if a.suffix == 'f')} with CMake {c.tool('cmake').version}",
             lambda c: f"CMake {c.tool('cmake').version} rejects the 'f' architecture suffix (ggml-cuda needs "
                       "CMake >= 3.31.8 or >= 4.0.2 for it)",
             _f("pip install 'cmake>=4.0.2', or use the 'a' targets")),
    )),
    Topic("Blackwell", "cuda", lambda c: c.regression, _f(""), (
        Rule(SLOWER, lambda c: c.blackwell_patch is None,
             lambda c: f"CUDA {c.cuda.version} + {_bw(c)}, patch {BLACKWELL_PATCH} applied",
             lambda c: f"CUDA {c.cuda.version} + Blackwell: built with patch {BLACKWELL_PATCH}; long-context "
                       f"generation is recovered, prefill is not; {_BETTER}",
             _f("for full speed build CUDA with 12.8: `assemble toolchain cuda 12.8.1` and --cuda-root ROOT, or the "
                "container recipes cuda128-vulkan / rocm-cuda128")),
        Rule(SLOWER, lambda c: c.accept_regression,
             lambda c: f"CUDA {c.cuda.version} + {_bw(c)}, regression accepted",
             lambda c: f"CUDA {c.cuda.version} + Blackwell: the 50-80% long-context generation slowdown was accepted "
                       f"and is recorded in the manifest; {_BETTER}",
             lambda c: ways_out()),
        Rule(REFUSE, _f(True),
             lambda c: f"CUDA {c.cuda.version} + {_bw(c)} (patch {BLACKWELL_PATCH}: {c.blackwell_patch})",
             lambda c: f"{c.cuda_label()} building for {_bw(c)} (Blackwell) loses 50-80% of token generation past "
                       "8k context",
             lambda c: ways_out()),
    )),
    # After the Blackwell rule on purpose: that refusal already points at another toolkit.
    Topic("cuBLAS", "cuda", lambda c: c.toolchain.cuda is not None, _f("libcublas.so + cublas_v2.h"), (
        Rule(REFUSE, lambda c: not c.cuda.has_cublas,
             lambda c: "runtime only" if c.cuda.cublas_runtime_only else "absent",
             lambda c: f"{c.cuda_label()} has no cuBLAS development files"
                       + (" (only the runtime libcublas.so.N, no libcublas.so / cublas_v2.h)"
                          if c.cuda.cublas_runtime_only else "") + ": the CUDA backend cannot link (CUDA::cublas)",
             lambda c: c.hint("cublas") or "install the toolkit's cuBLAS (e.g. libcublas-dev / cuda-libraries-dev), "
                                           "or provision one with `assemble toolchain cuda VERSION` (libcublas is "
                                           "among its components)"),
    )),
)


# --- ROCm / HIP -------------------------------------------------------------------------

def _uncovered(c: Context) -> list[GfxTarget]:
    have = kernel_archs(c.rocm.rocblas_data)
    return [t for t in c.targets if t.arch not in have]


def _lt_uncovered(c: Context) -> list[GfxTarget]:
    if not c.rocm.hipblaslt_data:
        return []
    have = kernel_archs(c.rocm.hipblaslt_data)
    return [t for t in c.targets if t.arch not in have]


def rocm_floor(targets: Sequence[GfxTarget]) -> tuple[int, int]:
    """The oldest ROCm (major, minor) that builds for every one of these targets: ggml's floor,
    raised by any card newer than it (ROCM_SINCE). build, doctor and matrix all ask here."""
    return max((MIN_ROCM, *(ROCM_SINCE.get(t.arch, MIN_ROCM) for t in targets)))


def rocm_floor_text(targets: Sequence[GfxTarget]) -> str:
    return ".".join(map(str, rocm_floor(targets)))


def _too_new(c: Context) -> list[GfxTarget]:
    """Targets this ROCm is older than (ggml's own floor aside)."""
    have = version_tuple(c.rocm_version)[:2]
    return [t for t in c.targets if have < ROCM_SINCE.get(t.arch, MIN_ROCM)]


def _rocm_ok(c: Context) -> bool:
    return c.toolchain.rocm is not None and c.rocm.version is not None and version_tuple(c.rocm.version)[:2] >= MIN_ROCM


HIP_TOPICS = (
    Topic("gfx targets", "hip", _f(True), lambda c: " ".join(map(str, c.targets)), (
        Rule(REFUSE, lambda c: not c.targets, _f("none"), _f("no gfx target for the HIP unit"),
             _f('name the card\'s arch: [hip] targets = ["gfx1100"] or --hip-target gfx1100')),
        Rule(REFUSE, lambda c: len(c.targets) > 1 and not c.multi_arch_risk,
             lambda c: " ".join(map(str, c.targets)),
             lambda c: f"{len(c.targets)} gfx targets in one HIP unit ({', '.join(map(str, c.targets))}): a sibling "
                       "arch links, loads and then segfaults",
             _f("build one runtime per card arch, or state the risk in [hip] multi_arch_risk")),
    )),
    Topic("ROCm", "hip", _f(True), lambda c: f"{c.rocm.version} at {c.rocm.root} (version from {c.rocm.version_source})", (
        Rule(REFUSE, lambda c: c.toolchain.rocm is None,
             lambda c: f"not found ({', '.join(rocm_searched(c.rocm_path, c.rocm_origin))})",
             lambda c: f"no ROCm found (looked at: {', '.join(rocm_searched(c.rocm_path, c.rocm_origin))}): the HIP backend cannot build",
             lambda c: c.hint("rocm") or "install ROCm >= 6.1 (AMD's packages, or Debian's hipcc + librocblas-dev + "
                                         "libhipblas-dev) and pass --rocm-path DIR or set ROCM_PATH"),
        Rule(REFUSE, lambda c: c.rocm.version is None,
             lambda c: f"unknown version at {c.rocm.root}",
             lambda c: f"ROCm at {c.rocm.root}: cannot tell its version (no hipconfig, .info/version or "
                       "hip-config-version.cmake answered); ggml-hip refuses < 6.1",
             _f("install the HIP development package (hipcc / hip-devel), or point --rocm-path at a complete ROCm")),
        Rule(REFUSE, lambda c: version_tuple(c.rocm_version)[:2] < MIN_ROCM,
             lambda c: f"{c.rocm.version} at {c.rocm.root}",
             lambda c: f"{c.rocm_label()} is older than 6.1; llama.cpp's HIP backend stops at configure below it",
             lambda c: c.hint("rocm") or "install ROCm >= 6.1 and pass --rocm-path DIR (Debian 12 ships 5.2: use "
                                         "sid's packages, scripts/rocm-sid-chroot.sh)"),

        Rule(REFUSE, lambda c: bool(_too_new(c)),
             lambda c: f"{c.rocm.version} at {c.rocm.root}; {' '.join(map(str, _too_new(c)))} needs >= "
                       f"{rocm_floor_text(_too_new(c))}",
             lambda c: f"{c.rocm_label()} is older than {rocm_floor_text(_too_new(c))}, the first ROCm that supports "
                       f"{', '.join(map(str, _too_new(c)))}",
             lambda c: f"install ROCm >= {rocm_floor_text(_too_new(c))} and pass --rocm-path DIR"),
    )),
    Topic("HIP compiler", "hip", _rocm_ok, lambda c: c.rocm.hip_clang or "", (
        Rule(REFUSE, lambda c: c.rocm.hip_clang is None, _f("none"),
             lambda c: f"{c.rocm_label()}: no HIP compiler (looked for {Path(c.rocm.root) / 'llvm/bin/clang'}, the "
                       f"clang `hipconfig --hipclangpath` names, and one {c.rocm.root}/lib/llvm-*/bin/clang)",
             _f("install the HIP compiler (AMD: rocm-llvm; Debian: hipcc, which pulls its clang)")),
    )),
    Topic("ROCm device libraries", "hip", lambda c: _rocm_ok(c) and c.rocm.hip_clang is not None,
          lambda c: c.rocm.device_libs or "", (
        Rule(REFUSE, lambda c: c.rocm.device_libs is None, _f("no ockl.bc"),
             lambda c: f"{c.rocm_label()}: no ROCm device library (ockl.bc) for {c.rocm.hip_clang} (looked in "
                       f"{Path(c.rocm.root) / 'amdgcn/bitcode'} and its resource dir); CMake's HIP compiler check "
                       "fails without it",
             _f("install the device libraries (AMD: rocm-device-libs; Debian: rocm-device-libs-N matching the "
                "clang-N that hipcc uses)")),
    )),
    Topic("hipBLAS/rocBLAS", "hip", _rocm_ok, _f("hipBLAS yes, rocBLAS yes"), (
        Rule(REFUSE, lambda c: not (c.rocm.hipblas and c.rocm.rocblas),
             lambda c: f"hipBLAS {'yes' if c.rocm.hipblas else 'no'}, rocBLAS {'yes' if c.rocm.rocblas else 'no'}",
             lambda c: f"{c.rocm_label()}: no {'hipBLAS' if not c.rocm.hipblas else 'rocBLAS'} library (ggml-hip's "
                       "configure needs both)",
             lambda c: c.hint("hipblas") or "install hipBLAS and rocBLAS development files (AMD: hipblas-dev "
                                            "rocblas-dev; Debian: libhipblas-dev librocblas-dev)"),
    )),
    Topic("rocBLAS kernels", "hip", lambda c: _rocm_ok(c) and bool(c.rocm.rocblas),
          lambda c: f"{' '.join(t.arch for t in c.targets)} present ({c.rocm.rocblas_data})", (
        Rule(REFUSE, lambda c: not kernel_archs(c.rocm.rocblas_data),
             _f("no Tensile data"),
             lambda c: f"{c.rocm_label()}: rocBLAS has no kernel data (no TensileLibrary files found"
                       f"{' in ' + c.rocm.rocblas_data if c.rocm.rocblas_data else ''})",
             _f("install rocBLAS with its data files (librocblas0/librocblas4 on Debian, rocblas on AMD's "
                "repositories)")),
        Rule(REFUSE, lambda c: bool(_uncovered(c)),
             lambda c: f"no {', '.join(t.arch for t in _uncovered(c))} among "
                       f"{' '.join(kernel_archs(c.rocm.rocblas_data))}",
             lambda c: f"rocBLAS in {c.rocm.rocblas_data} has no kernels for {', '.join(map(str, _uncovered(c)))} "
                       f"(it has: {', '.join(kernel_archs(c.rocm.rocblas_data))}); the runtime would abort at its "
                       "first GEMM, the first matrix multiply (\"Cannot read ... TensileLibrary.dat\"), after /health said ok",
             lambda c: f"use a ROCm whose rocBLAS ships TensileLibrary_lazy_{_uncovered(c)[0].arch}.dat "
                       "(pass --rocm-path DIR), or target an arch from that list"),
    )),
    Topic("hipBLASLt kernels", "hip", lambda c: _rocm_ok(c) and bool(c.rocm.hipblaslt_data),
          lambda c: f"{' '.join(t.arch for t in c.targets)} present", (
        Rule(SLOWER, lambda c: bool(_lt_uncovered(c)),
             lambda c: f"no {', '.join(t.arch for t in _lt_uncovered(c))} data",
             lambda c: f"hipBLASLt has no kernels for {', '.join(t.arch for t in _lt_uncovered(c))}: "
                       "it falls back to slower ones",
             _f("a hipBLASLt built for that arch (a newer ROCm)")),
    )),
)


# --- Vulkan -----------------------------------------------------------------------------

def header_lacks(v: VulkanSdk) -> list[str]:
    return [e for e in VULKAN_REQUIRED_EXTENSIONS if e not in v.header_extensions]


def _glslc_lacks(c: Context) -> list[str]:
    g = c.toolchain.glslc
    return [e for e, ok in g.extensions.items() if ok is False] if g else []


def _glslc_unknown(c: Context) -> list[str]:
    g = c.toolchain.glslc
    return [e for e, ok in g.extensions.items() if ok is None] if g else []


def glslc_summary(extensions: dict[str, bool | None]) -> str:
    """"coopmat yes, coopmat2 no, bf16 ?": what glslc answered for each extension ggml probes."""
    return ", ".join(f"{SHORT_EXT.get(e, e)} {'yes' if ok else 'no' if ok is False else '?'}"
                     for e, ok in extensions.items())


def _ext_found(c: Context) -> str:
    return glslc_summary(c.glslc.extensions)


def tested_note(v: VulkanSdk) -> str:
    return "" if v.header_version is None or version_tuple(v.header_version) >= version_tuple(VULKAN_TESTED) else \
        f"; older than {VULKAN_TESTED}, the version this pin was built with"


def _host_vulkan(c: Context) -> bool:
    return c.toolchain.vulkan is not None and c.toolchain.where == HOST


VULKAN_TOPICS = (
    Topic("Vulkan headers", "vulkan", _host_vulkan,
          lambda c: f"{c.vulkan.header_version} ({c.vulkan.header_dir}): has every extension ggml-vulkan uses "
                    f"unguarded{tested_note(c.vulkan)}", (
        Rule(REFUSE, lambda c: c.vulkan.header_version is None, _f("not found"),
             _f("no vulkan/vulkan_core.h: the Vulkan backend cannot build"),
             lambda c: c.hint("vulkan-headers")),
        Rule(REFUSE, lambda c: bool(header_lacks(c.vulkan)), lambda c: c.vulkan.header_version or "",
             lambda c: f"Vulkan headers {c.vulkan.header_version} are too old for this llama.cpp: they lack "
                       f"{', '.join(header_lacks(c.vulkan))} (ggml-vulkan.cpp fails: 'LayerSettingEXT' is not a "
                       "member of 'vk')",
             lambda c: c.hint("vulkan-headers")),
        Rule(REFUSE, lambda c: not c.vulkan.has_hpp, lambda c: c.vulkan.header_version or "",
             _f("vulkan.hpp missing beside vulkan_core.h (ggml-vulkan is C++)"), lambda c: c.hint("vulkan-headers")),
    )),
    Topic("Vulkan loader", "vulkan", _host_vulkan, lambda c: f"{c.vulkan.loader_dev}: links libvulkan.so", (
        Rule(REFUSE, lambda c: not c.vulkan.loader_dev, _f("no libvulkan.so"),
             _f("no Vulkan loader (libvulkan.so) to link against"), lambda c: c.hint("vulkan-loader")),
    )),
    Topic("SPIRV-Headers", "vulkan", _host_vulkan, lambda c: f"{c.vulkan.spirv_headers}", (
        Rule(REFUSE, lambda c: not c.vulkan.spirv_headers, _f("not found"),
             _f("no SPIRV-Headers: ggml-vulkan's find_package(SPIRV-Headers CONFIG REQUIRED) fails"),
             lambda c: c.hint("spirv-headers")),
    )),
    Topic("glslc", "vulkan", _host_vulkan, lambda c: f"{c.glslc_tool.version} ({c.glslc_tool.path}): compiles shaders", (
        Rule(REFUSE, lambda c: c.vulkan.glslc is None, _f("not found"),
             _f("no glslc: find_package(Vulkan COMPONENTS glslc) fails"), lambda c: c.hint("glslc")),
        Rule(REFUSE, lambda c: c.toolchain.glslc is not None and not c.toolchain.glslc.works,
             lambda c: f"{c.glslc_tool.version} ({c.glslc_tool.path})",
             lambda c: f"glslc does not compile a plain shader: {c.glslc.error}",
             lambda c: c.hint("glslc") + " (one that runs on this system)"),
    )),
    Topic("glslc extensions", "vulkan",
          lambda c: _host_vulkan(c) and c.toolchain.glslc is not None and c.toolchain.glslc.works,
          lambda c: f"{_ext_found(c)}: every shader variant ggml probes for", (
        Rule(SLOWER, lambda c: bool(_glslc_lacks(c)), _ext_found,
             lambda c: "builds, but shaders are slower without: "
                       + ", ".join(GLSLC_MEANING.get(e, e) for e in _glslc_lacks(c)),
             lambda c: c.hint("glslc-newer")),
        Rule(SLOWER, lambda c: bool(_glslc_unknown(c)), _ext_found,
             _f("glslc did not answer in time for some probes, so the build may lose shader variants"),
             _f("run `assemble doctor` again; a loaded machine slows glslc")),
    )),
)


# --- what every build needs ---------------------------------------------------------------

_BUILD_TOOLS = (("cmake", "cmake", "cmake"), ("ninja", "ninja", "ninja"), ("cc", "cc", "compilers"),
                ("cxx", "c++", "compilers"), ("patchelf", "patchelf", "patchelf"), ("git", "git", "git"))


def _missing_tools(c: Context) -> list[tuple[str, str]]:
    return [(label, component) for attr, label, component in _BUILD_TOOLS if getattr(c.toolchain, attr) is None]


def _launcher_missing(c: Context) -> bool:
    return c.toolchain.launcher_choice not in ("auto", "none") and c.toolchain.launcher is None


def _old_patchelf(c: Context) -> bool:
    v = c.tool("patchelf").version
    return v != "unknown" and version_tuple(v) < MIN_PATCHELF


BUILD_TOPICS = (
    Topic("build tools", "build", lambda c: c.toolchain.where == HOST,
          lambda c: ", ".join(label for _, label, _ in _BUILD_TOOLS)
          + (f", {c.toolchain.launcher.name}" if c.toolchain.launcher else ""), (
        Rule(REFUSE, lambda c: bool(_missing_tools(c)),
             lambda c: "no " + ", ".join(label for label, _ in _missing_tools(c)),
             lambda c: f"missing {', '.join(label for label, _ in _missing_tools(c))}: every build needs them",
             lambda c: "; ".join(dict.fromkeys(c.hint(comp) or f"install {label}" for label, comp in _missing_tools(c)))),
        Rule(REFUSE, _old_patchelf, lambda c: f"patchelf {c.tool('patchelf').version}",
             lambda c: f"patchelf {c.tool('patchelf').version} at {c.tool('patchelf').path} is too old: 0.17.x and "
                       "0.18.0 corrupt CUDA libraries when the bundle sets their RPATH",
             lambda c: c.hint("patchelf")),
        Rule(REFUSE, _launcher_missing, lambda c: f"no {c.toolchain.launcher_choice}",
             lambda c: f"compiler launcher '{c.toolchain.launcher_choice}' not found on PATH",
             lambda c: f"install {c.toolchain.launcher_choice} or pass --launcher none"),
        Rule(REFUSE, lambda c: "hip" in c.unit.backends and version_tuple(c.tool("cmake").version) < CMAKE_MIN_HIP,
             lambda c: f"cmake {c.tool('cmake').version}", _f("ggml-hip needs CMake >= 3.21"),
             lambda c: c.hint("cmake") or "pip install 'cmake>=3.21'"),
    )),
)

TOPICS = BUILD_TOPICS + CUDA_TOPICS + HIP_TOPICS + VULKAN_TOPICS


# --- the evaluator --------------------------------------------------------------------------

def context(config: BuildConfig, unit: UnitConfig, tc: Toolchain, blackwell_patch: str | None,
            distro: Distro, provisioned: tuple[tuple[str, str], ...] = ()) -> Context:
    """What the rules judge for one unit of a resolved build: the same for `build` and `doctor`."""
    return Context(unit=unit, toolchain=tc, recipe=config.recipe, accept_regression=config.accept_blackwell_regression,
                   blackwell_patch=blackwell_patch, rocm_path=config.places.rocm_path.value,
                   rocm_origin=config.places.rocm_path.origin, distro=distro, provisioned=provisioned)


def evaluate(c: Context) -> tuple[Finding, ...]:
    """Every topic that concerns this unit, in declaration order: the first rule of a topic that
    fires is its finding, else the topic is fine."""
    out = []
    for topic in TOPICS:
        if topic.backend != "build" and topic.backend not in c.unit.backends:
            continue
        if not topic.shown(c):
            continue
        rule = next((r for r in topic.rules if r.when(c)), None)
        if rule is None:
            out.append(Finding(topic.name, OK, topic.ok(c), backend=topic.backend))
        else:
            out.append(Finding(topic.name, rule.level, rule.found(c), rule.means(c), rule.fix(c), topic.backend))
    return tuple(out)


def enforce(c: Context, where: str) -> tuple[Finding, ...]:
    """What `build` does with the findings: the first refusal stops it (AssembleError, exit 2),
    the rest comes back to be said (warnings)."""
    findings = evaluate(c)
    refused = next((f for f in findings if f.level == REFUSE), None)
    if refused is not None:
        raise refused.error(where)
    return tuple(f for f in findings if f.level == SLOWER)


# --- what the manifest records of a unit's toolkits -------------------------------------------

def cuda_record(c: Context) -> dict[str, Any]:
    state = NOT_APPLICABLE if not c.regression else PATCHED if c.blackwell_patch is None else ACCEPTED
    return {"toolkit": c.cuda.version, "root": c.cuda.root, "archs": [str(a) for a in c.archs],
            "blackwell_targets": [str(a) for a in c.blackwell], "blackwell_regression": state}


def hip_record(c: Context, findings: Sequence[Finding] = ()) -> dict[str, Any]:
    """notes: what the HIP rules said short of a refusal (hipBLASLt falling back)."""
    r = c.rocm
    notes = [f.means for f in findings if f.backend == "hip" and f.level == SLOWER]
    return {"rocm": r.version, "path": r.root, "version_source": r.version_source, "hip_compiler": r.hip_clang,
            "device_libs": r.device_libs, "hip_flags": list(r.hip_flags()), "targets": [str(t) for t in c.targets],
            "rocblas_data": r.rocblas_data, "rocblas_archs": list(kernel_archs(r.rocblas_data)),
            "hipblaslt_archs": list(kernel_archs(r.hipblaslt_data)), "multi_arch_risk": c.multi_arch_risk,
            "notes": list(notes)}
