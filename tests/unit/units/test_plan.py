"""The CMake plan of every shipped recipe: the flags that make a runtime shippable."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.units.plan import UnitPlan, plan_unit
from builder.config.options import HOST, CliOptions, resolve
from builder.config.recipe import all_recipes, load_recipe
from builder.config.targets import DEFAULT_CUDA_ARCHITECTURES, CudaArch, GfxTarget
from builder.toolchain.detect import Tool, Toolchain, rocm
from tests.support.rocmtrees import amd_rocm

TREE = Path("/nonexistent/llama.cpp")
TOOLS = Toolchain(HOST, cmake=Tool("cmake", "/usr/bin/cmake", "3.31.6"), ninja=Tool("ninja", "/usr/bin/ninja", "1.12"),
                  cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"))


def plan(name: str, toolchain: Toolchain = TOOLS, **cli) -> UnitPlan:
    r = load_recipe(name)
    config = resolve(r, CliOptions(**cli), env={})
    return plan_unit(config, config.units[0], toolchain, TREE, r.pin.sha)


@pytest.mark.parametrize("recipe", [r.name for r in all_recipes()])
def test_every_recipe_is_shippable(recipe, isolated_cache):
    """Every unit of every shipped recipe, container units included (rendered with the image's tools)."""
    p = plan(recipe)
    d = dict(p.defines)
    assert d["GGML_BACKEND_DL"] == "ON"
    assert d["GGML_NATIVE"] == "OFF"
    assert d["LLAMA_BUILD_EXAMPLES"] == "OFF"
    # upstream's tests are configured only to build test-backend-ops ([tests] backend_ops), never all
    assert d["LLAMA_BUILD_TESTS"] == ("ON" if "test-backend-ops" in p.targets else "OFF")
    assert [t for t in p.targets if t.startswith("test-")] in ([], ["test-backend-ops"])
    assert d["LLAMA_USE_PREBUILT_UI"] == "OFF"  # no network during the build
    assert "native" not in d.get("CMAKE_CUDA_ARCHITECTURES", "")


def test_cuda_flags(isolated_cache):
    d = dict(plan("cuda-vulkan").defines)
    assert d["GGML_CUDA"] == "ON" and d["GGML_VULKAN"] == "ON" and d["GGML_HIP"] == "OFF"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == ";".join(DEFAULT_CUDA_ARCHITECTURES)    # the recipe names none
    assert d["GGML_CUDA_NCCL"] == "OFF"
    assert dict(plan("cuda-vulkan", cuda_archs=(CudaArch.parse("90"),)).defines)["CMAKE_CUDA_ARCHITECTURES"] == "90"


def test_hip_flags_come_from_the_rocm_found(isolated_cache, tmp_path):
    root = amd_rocm(tmp_path / "rocm-6.4")
    tc = Toolchain(HOST, cmake=TOOLS.cmake, ninja=TOOLS.ninja, cc=TOOLS.cc, cxx=TOOLS.cxx, rocm=rocm(str(root)))
    p = plan("rocm", tc)
    d = dict(p.defines)
    assert d["GGML_HIP"] == "ON" and d["GPU_TARGETS"] == "gfx1100" and d["AMDGPU_TARGETS"] == "gfx1100"
    assert d["GGML_HIP_RCCL"] == "OFF"
    assert d["CMAKE_HIP_COMPILER"] == str(root / "llvm" / "bin" / "clang") and d["CMAKE_PREFIX_PATH"] == str(root)
    assert ("ROCM_PATH", str(root)) in p.env
    assert dict(plan("rocm", tc, hip_target=GfxTarget.parse("gfx1201")).defines)["GPU_TARGETS"] == "gfx1201"
    # no ROCm found: the plan says so where the paths would be, it never guesses one
    assert dict(plan("rocm").defines)["CMAKE_HIP_COMPILER"] == "<no HIP compiler found>"


def test_rocm_cuda_one_configure(isolated_cache):
    r = load_recipe("rocm-cuda")
    assert len(r.units) == 1
    d = dict(plan("rocm-cuda").defines)
    assert d["GGML_HIP"] == "ON" and d["GGML_CUDA"] == "ON"


def test_overrides_win_and_change_the_build_dir(isolated_cache):
    a = plan("cpu")
    b = plan("cpu", defines=(("GGML_OPENMP", "OFF"),))
    assert dict(a.defines).get("GGML_OPENMP") != "OFF"
    assert dict(b.defines)["GGML_OPENMP"] == "OFF"
    assert a.build_dir != b.build_dir and a.key != b.key
    assert plan("cpu").build_dir == a.build_dir  # same inputs, same folder: a repeat build reuses it


def test_show_prints_cmake_lines_for_every_recipe(isolated_cache):
    from tests.support.common import assemble
    for r in all_recipes():
        proc = assemble("show", r.name)
        assert proc.returncode == 0, proc.stderr
        assert "-DGGML_BACKEND_DL=ON" in proc.stdout and "--build" in proc.stdout
        assert not list(isolated_cache.glob("*")), "show must not write anything"
