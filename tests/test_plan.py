"""The CMake plan of every shipped recipe: the flags that make a runtime shippable."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.build import cmake
from builder.config.recipe import all_recipes, load_recipe

TREE = Path("/nonexistent/llama.cpp")


def plan(name: str, **kw) -> cmake.UnitPlan:
    r = load_recipe(name)
    return cmake.plan_unit(r, r.units[0], TREE, r.pin.sha, cmake.Overrides(**kw), strict=False)


@pytest.mark.parametrize("recipe", [r.name for r in all_recipes() if not any(u.container for u in r.units)])
def test_every_recipe_is_shippable(recipe, isolated_cache):
    d = dict(plan(recipe).defines)
    assert d["GGML_BACKEND_DL"] == "ON"
    assert d["GGML_NATIVE"] == "OFF"
    assert d["LLAMA_BUILD_TESTS"] == "OFF" and d["LLAMA_BUILD_EXAMPLES"] == "OFF"
    assert d["LLAMA_USE_PREBUILT_UI"] == "OFF"  # no network during the build
    assert "native" not in d.get("CMAKE_CUDA_ARCHITECTURES", "")


def test_cuda_flags(isolated_cache):
    d = dict(plan("cuda-vulkan").defines)
    assert d["GGML_CUDA"] == "ON" and d["GGML_VULKAN"] == "ON" and d["GGML_HIP"] == "OFF"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "80;86;89;90;120"
    assert d["GGML_CUDA_NCCL"] == "OFF"
    assert dict(plan("cuda-vulkan", cuda_archs=("90",)).defines)["CMAKE_CUDA_ARCHITECTURES"] == "90"


def test_hip_flags(isolated_cache):
    p = plan("rocm", rocm_path="/opt/rocm-6.4")
    d = dict(p.defines)
    assert d["GGML_HIP"] == "ON" and d["GPU_TARGETS"] == "gfx1100" and d["AMDGPU_TARGETS"] == "gfx1100"
    assert d["GGML_HIP_RCCL"] == "OFF"
    assert d["CMAKE_HIP_COMPILER"] == "/opt/rocm-6.4/llvm/bin/clang"
    assert ("ROCM_PATH", "/opt/rocm-6.4") in p.env
    assert dict(plan("rocm", hip_target="gfx1201").defines)["GPU_TARGETS"] == "gfx1201"


def test_rocm_cuda_one_configure(isolated_cache):
    r = load_recipe("rocm-cuda")
    assert len(r.units) == 1
    d = dict(plan("rocm-cuda").defines)
    assert d["GGML_HIP"] == "ON" and d["GGML_CUDA"] == "ON"


def test_overrides_win_and_change_the_build_dir(isolated_cache):
    a = plan("cpu")
    b = plan("cpu", defines=(("GGML_OPENMP", "OFF"),))
    assert dict(b.defines)["GGML_OPENMP"] == "OFF"
    assert a.build_dir != b.build_dir and a.key != b.key
    assert plan("cpu").build_dir == a.build_dir  # same inputs, same folder: a repeat build reuses it


def test_show_prints_cmake_lines_for_every_recipe(isolated_cache):
    from tests.conftest import assemble
    for r in all_recipes():
        proc = assemble("show", r.name)
        assert proc.returncode == 0, proc.stderr
        assert "-DGGML_BACKEND_DL=ON" in proc.stdout and "--build" in proc.stdout
        assert not list(isolated_cache.glob("*")), "show must not write anything"
