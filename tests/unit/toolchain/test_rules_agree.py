"""`build` and `doctor` judge a toolchain with the same rules, so they cannot disagree.

A table of toolchains (what a host may have), each run through what `build` does before
CMake (the pipeline's own enforcement) and through `doctor --recipe` (its recipe rows and
verdict): a refusal in one is a "missing" in the other, in the same words; a warning in one
is "slower" in the other; a clean build is "ready"."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from builder.config.targets import CudaArch
from builder.flows import build as build_flow
from builder.check import doctor
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.errors import AssembleError
from builder.toolchain import detect as tc
from builder.toolchain.detect import CudaToolkit, GlslcProbe, RocmInstall, Tool, Toolchain, VulkanSdk

TOOLS = dict(cmake=Tool("cmake", "/usr/bin/cmake", "3.31.6"), ninja=Tool("ninja", "/usr/bin/ninja", "1.12.1"),
             cc=Tool("cc", "/usr/bin/cc", "gcc 14"), cxx=Tool("c++", "/usr/bin/c++", "g++ 14"),
             patchelf=Tool("patchelf", "/usr/bin/patchelf", "0.19.3"), git=Tool("git", "/usr/bin/git", "2.39.5"))
ARCHS = CudaArch.parse_list("75,80,86,89,90,100,120", "test")


def cuda(version: str = "12.8", archs=ARCHS, cublas: bool = True) -> CudaToolkit:
    return CudaToolkit(f"/usr/local/cuda-{version}", f"/usr/local/cuda-{version}/bin/nvcc", version, archs, cublas)


def rocm(tmp_path, version: str | None = "6.4.1", rocblas=("gfx1100",), clang: bool = True) -> RocmInstall:
    data = tmp_path / f"rocblas-{version}-{'-'.join(rocblas)}"
    data.mkdir()
    for gfx in rocblas:
        (data / f"TensileLibrary_lazy_{gfx}.dat").write_bytes(b"")
    return RocmInstall("/opt/rocm", version, "hipconfig --version", "/opt/rocm/bin/hipconfig", "/opt/rocm/lib/libamdhip64.so",
                       "/opt/rocm/lib/libhipblas.so", "/opt/rocm/lib/librocblas.so", str(data), tuple(rocblas),
                       hip_clang="/opt/rocm/llvm/bin/clang" if clang else None, device_libs="/opt/rocm/amdgcn/bitcode")


EXTS = ("GL_KHR_cooperative_matrix", "GL_EXT_integer_dot_product")
GOOD_VK = VulkanSdk("1.4.309", Tool("glslc", "/usr/bin/glslc", "2025.2"), "/usr/include",
                    frozenset({"VK_EXT_layer_settings", "VK_EXT_pipeline_robustness", "VK_EXT_device_fault"}), True,
                    "/usr/lib/libvulkan.so", "/usr/lib/libvulkan.so.1", "/usr/share/cmake/SPIRV-HeadersConfig.cmake")


def case(recipe: str, expect: str, cli: CliOptions = CliOptions(), **toolchain):
    return pytest.param(recipe, cli, toolchain, expect, id=f"{recipe}-{expect}-{'-'.join(sorted(toolchain)) or 'bare'}")


CASES = [
    case("cpu", "ready"),
    case("cpu", "missing", cc=None, cxx=None),
    case("cpu", "missing", git=None),
    case("cpu", "missing", patchelf=Tool("patchelf", "/usr/bin/patchelf", "0.18.0")),
    case("cuda", "ready", cuda=cuda("12.8")),
    case("cuda", "missing", cuda=None),
    case("cuda", "missing", cuda=cuda("13.0")),                                         # Blackwell, no way out chosen
    case("cuda", "slower", CliOptions(accept_blackwell_regression=True), cuda=cuda("13.0")),
    case("cuda", "missing", cuda=cuda("12.4", archs=ARCHS[:5])),  # cannot target sm_120
    case("cuda", "missing", cuda=cuda("12.8", cublas=False)),
    case("cuda", "missing", CliOptions(launcher="sccache"), cuda=cuda("12.8")),          # asked-for launcher absent
    case("rocm", "ready", rocm="6.4.1"),
    case("rocm", "missing", rocm=None),
    case("rocm", "missing", rocm="6.0.2"),
    case("rocm", "missing", rocm="unknown"),
    case("rocm", "missing", rocm="no-clang"),
    case("rocm", "missing", rocm="gfx1030-only"),
    case("rocm", "missing", cmake=Tool("cmake", "/usr/bin/cmake", "3.20.0"), rocm="6.4.1"),
    case("vulkan", "ready", vulkan=GOOD_VK, glslc=GlslcProbe(True, None, dict.fromkeys(EXTS, True))),
    case("vulkan", "slower", vulkan=GOOD_VK, glslc=GlslcProbe(True, None, {EXTS[0]: False, EXTS[1]: True})),
    case("vulkan", "missing", vulkan=dataclasses.replace(GOOD_VK, header_version="1.3.239",
                                                         header_extensions=frozenset())),
    case("vulkan", "missing", vulkan=GOOD_VK, glslc=GlslcProbe(False, "GLIBC_2.38 not found")),
    case("cuda-vulkan", "missing", cuda=None, vulkan=GOOD_VK, glslc=GlslcProbe(True, None, {})),
]


def _rocm_for(tmp_path, spec):
    if spec is None or isinstance(spec, RocmInstall):
        return spec
    if spec == "unknown":
        return dataclasses.replace(rocm(tmp_path), version=None, version_source=None)
    if spec == "no-clang":
        return rocm(tmp_path, clang=False)
    if spec == "gfx1030-only":
        return rocm(tmp_path, rocblas=("gfx1030",))
    return rocm(tmp_path, version=spec)


@pytest.mark.parametrize("recipe_name, cli, parts, expect", CASES)
def test_build_refuses_exactly_what_doctor_calls_missing(recipe_name, cli, parts, expect, tmp_path, monkeypatch):
    parts = dict(parts)
    if "rocm" in parts:
        parts["rocm"] = _rocm_for(tmp_path, parts["rocm"])
    toolchain = Toolchain("host", **{**TOOLS, **parts, "launcher_choice": cli.launcher})
    config = resolve(load_recipe(recipe_name), cli, env={})
    distro = tc.Distro("debian", (), "13", "trixie", "Debian GNU/Linux 13")
    monkeypatch.setattr(build_flow, "distro", lambda: distro)          # both name this host's packages alike
    patch = doctor.blackwell_patch(config, toolchain.cuda)

    # build: the pipeline's own enforcement, before CMake
    refused, warned = None, []
    try:
        monkeypatch.setattr(build_flow.ui, "warn", warned.append)
        build_flow._enforce(config, config.wanted(), {u.name: toolchain for u in config.units}, patch)
    except AssembleError as exc:
        refused = exc

    # doctor: the same host as facts, its recipe rows and verdict
    facts = doctor.Facts(distro=distro, python=Tool("python", sys.executable, "3.11.7"), cmake=toolchain.cmake,
                         ninja=toolchain.ninja, patchelf=toolchain.patchelf, git=toolchain.git, cc=toolchain.cc, cxx=toolchain.cxx,
                         cuda=toolchain.cuda, driver=None, vulkan=toolchain.vulkan or VulkanSdk(None, None),
                         glslc=toolchain.glslc, rocm=toolchain.rocm)
    diagnosis = doctor.diagnose(load_recipe(recipe_name), facts, cli=cli)
    rows = [c for c in diagnosis.checks if c.section == "recipe"]

    assert diagnosis.verdict.state == expect, diagnosis.verdict.line
    assert (refused is not None) == (expect == "missing"), refused and refused.line()
    if refused is not None:       # the first refusal of build is a missing row of doctor, word for word
        row = next(r for r in rows if r.status == doctor.MISSING)
        assert (refused.what, refused.fix) == (row.meaning, row.hint)
    slower = [r.meaning for r in rows if r.status == doctor.WARN]
    if expect != "missing":
        assert warned == slower          # the same warnings, in the same words


@pytest.mark.parametrize("optin", ["none", "patch", "accept"])
@pytest.mark.parametrize("version", ["12.4", "12.8", "12.9", "13.0", "13.1"])
def test_matrix_asks_runners_for_exactly_the_cuda_build_accepts(optin, version, monkeypatch):
    """The toolkit constraint `assemble matrix` prints for a CUDA job (sm_120 in the list) holds for a
    version exactly when `build` would not refuse that toolkit: both read toolchain.rules."""
    from builder.config.versions import satisfies
    from builder.release import matrix
    from builder.toolchain.rules import BLACKWELL_PATCH
    r = load_recipe("cuda")
    if optin == "patch":
        r = dataclasses.replace(r, patches_on=(BLACKWELL_PATCH,))
    elif optin == "accept":
        r = dataclasses.replace(r, cuda=dataclasses.replace(r.cuda, accept_blackwell_regression=True))
    (entry,) = matrix.entries([r])
    spec = entry.needs.cuda_toolkit
    toolkit = cuda(version, archs=ARCHS if version >= "12.8" else ARCHS[:5])
    toolchain = Toolchain("host", **{**TOOLS, "cuda": toolkit, "launcher_choice": CliOptions().launcher})
    config = resolve(r, CliOptions(), env={})
    monkeypatch.setattr(build_flow, "distro", lambda: tc.Distro("debian", (), "13", "trixie", "Debian GNU/Linux 13"))
    monkeypatch.setattr(build_flow.ui, "warn", lambda text: None)
    try:
        build_flow._enforce(config, config.wanted(), {u.name: toolchain for u in config.units},
                          doctor.blackwell_patch(config, toolkit))
        refused = False
    except AssembleError:
        refused = True
    assert refused == (not satisfies(version, spec)), (version, spec)
    if optin == "none":
        assert spec == ">=12.8,<13" and "sm_120" in entry.needs.summary
