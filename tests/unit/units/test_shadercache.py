"""The glslc cache (builder/units/shadercache.py), run through its wrapper script against the real glslc
on small shaders with an #include, as vulkan-shaders-gen runs it: what it stores, when it answers, what
it leaves to glslc, the dependency file a hit writes, its pruning; and when a unit plan uses it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.config.options import HOST, CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.toolchain.detect import Tool, Toolchain, VulkanSdk
from builder.units import shadercache
from builder.units.plan import plan_unit

GLSLC = shutil.which("glslc") or "glslc: not installed (scripts/ci-setup.sh installs it)"

SHADER = """#version 450
#extension GL_GOOGLE_include_directive : require
#include "scale.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) buffer D { float d[]; };
void main() { d[gl_GlobalInvocationID.x] *= SCALE * FACTOR; }
"""


def _tree(root: Path, factor: str = "2.0") -> Path:
    root.mkdir(parents=True)
    (root / "scale.glsl").write_text(f"const float FACTOR = {factor};\n")
    (root / "scale.comp").write_text(SHADER)
    return root


@pytest.fixture
def wrapper(tmp_path, monkeypatch):
    monkeypatch.setenv(shadercache.STATS_ENV, str(tmp_path / "stats.log"))
    return shadercache.enable(tmp_path / "cache", GLSLC)


def _compile(wrapper: Path, tree: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """vulkan-shaders-gen's command line: stage, target, absolute input, -o, -O, -MD -MF, defines."""
    return subprocess.run([str(wrapper), "-fshader-stage=compute", "--target-env=vulkan1.2", str(tree / "scale.comp"),
                           "-o", str(out), "-O", "-MD", "-MF", f"{out}.d", "-DSCALE=3.0", *extra],
                          capture_output=True, timeout=60)


def _stats(tmp_path: Path) -> tuple[int, int] | None:
    return shadercache.read_stats(tmp_path / "stats.log")


def _direct(tree: Path, out: Path) -> bytes:
    subprocess.run([GLSLC, "-fshader-stage=compute", "--target-env=vulkan1.2", str(tree / "scale.comp"), "-o",
                    str(out), "-O", "-DSCALE=3.0"], check=True, timeout=60)
    return out.read_bytes()


def test_a_second_tree_is_answered_from_the_store_with_its_own_dependencies(tmp_path, wrapper):
    a, b = _tree(tmp_path / "a" / "shaders"), _tree(tmp_path / "b" / "shaders")
    first = _compile(wrapper, a, tmp_path / "a.spv")
    assert first.returncode == 0 and first.stderr == b"", first.stderr
    assert _stats(tmp_path) == (0, 1)
    second = _compile(wrapper, b, tmp_path / "b.spv")
    assert second.returncode == 0 and second.stdout == second.stderr == b""   # vulkan-shaders-gen: stderr fails
    assert _stats(tmp_path) == (1, 1)
    assert (tmp_path / "b.spv").read_bytes() == (tmp_path / "a.spv").read_bytes() == _direct(b, tmp_path / "d.spv")
    target, deps = (tmp_path / "b.spv.d").read_text().split(": ", 1)
    assert target == str(tmp_path / "b.spv")
    assert set(deps.split()) == {str(b / "scale.comp"), str(b / "scale.glsl")}


@pytest.mark.parametrize("change", ["include", "define", "flag"])
def test_what_changes_the_spirv_misses(tmp_path, wrapper, change):
    a = _tree(tmp_path / "a")
    _compile(wrapper, a, tmp_path / "a.spv")
    b = _tree(tmp_path / "b", factor="4.0" if change == "include" else "2.0")
    extra = {"include": (), "define": ("-DEXTRA=1",), "flag": ("-Os",)}[change]
    assert _compile(wrapper, b, tmp_path / "b.spv", *extra).returncode == 0
    assert _stats(tmp_path) == (0, 2)
    if change == "include":
        assert (tmp_path / "b.spv").read_bytes() != (tmp_path / "a.spv").read_bytes()


def test_what_it_cannot_key_goes_to_glslc_itself(tmp_path, wrapper):
    """CMake's feature tests (-o -), preprocessing (-E), debug info (-g, paths in the SPIR-V): glslc's
    own answer, nothing stored or counted."""
    a = _tree(tmp_path / "a")
    to_stdout = subprocess.run([str(wrapper), "-o", "-", "-fshader-stage=compute", "--target-env=vulkan1.3",
                                str(a / "scale.comp"), "-DSCALE=1.0"], capture_output=True, timeout=60)
    assert to_stdout.returncode == 0 and to_stdout.stdout[:4] == b"\x03\x02\x23\x07"   # SPIR-V's magic
    assert _compile(wrapper, a, tmp_path / "g.spv", "-g").returncode == 0
    assert _stats(tmp_path) is None
    assert not list((tmp_path / "cache" / "glslc").glob("??/*.spv"))


def test_a_broken_shader_fails_as_glslc_fails_and_is_not_stored(tmp_path, wrapper):
    a = _tree(tmp_path / "a")
    (a / "scale.glsl").write_text("const float FACTOR = ;\n")
    proc = _compile(wrapper, a, tmp_path / "a.spv")
    assert proc.returncode != 0 and b"scale.glsl" in proc.stderr
    assert not list((tmp_path / "cache" / "glslc").glob("??/*.spv"))


def test_the_wrapper_is_named_by_the_glslc_it_runs(tmp_path):
    """The define that names it is in the build folder's key: it must not change with the interpreter."""
    first = shadercache.wrapper_path(tmp_path, GLSLC)
    assert shadercache.enable(tmp_path, GLSLC) == first
    assert first.read_text().count(GLSLC) >= 1 and os.access(first, os.X_OK)
    assert shadercache.wrapper_path(tmp_path / "other", GLSLC).name == first.name


def test_prune_removes_the_least_recently_used_first(tmp_path):
    store = shadercache.store_dir(tmp_path)
    for i in range(10):
        p = store / f"{i:02d}" / f"{i:02d}x.spv"
        p.parent.mkdir(parents=True)
        p.write_bytes(b"x" * 100)
        os.utime(p, ns=(i * 10**9, i * 10**9))
    assert shadercache.prune(tmp_path, cap=2000) == 0
    assert shadercache.prune(tmp_path, cap=500) == 6       # down to 80% of 500
    assert sorted(p.name for p in store.glob("??/*.spv")) == ["06x.spv", "07x.spv", "08x.spv", "09x.spv"]


def _vulkan_plan(isolated_cache, launcher: Tool | None):
    r = load_recipe("vulkan")
    config = resolve(r, CliOptions(), env={})
    tc = Toolchain(HOST, cmake=Tool("cmake", "/usr/bin/cmake", "3.31.6"), ninja=Tool("ninja", "/usr/bin/ninja", "1.12"),
                   cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"), launcher=launcher,
                   vulkan=VulkanSdk("1.4.309", Tool("glslc", GLSLC, "shaderc")))
    return plan_unit(config, config.units[0], tc, Path("/nonexistent/llama.cpp"), r.pin.sha)


def test_a_vulkan_unit_with_a_launcher_uses_it_and_one_without_does_not(isolated_cache):
    cached = _vulkan_plan(isolated_cache, Tool("ccache", "/usr/bin/ccache", "4.14"))
    assert cached.glslc_cached == GLSLC
    assert dict(cached.defines)["Vulkan_GLSLC_EXECUTABLE"] == str(shadercache.wrapper_path(isolated_cache, GLSLC))
    plain = _vulkan_plan(isolated_cache, None)           # --launcher none: nothing cached, glslc as found
    assert plain.glslc_cached is None and "Vulkan_GLSLC_EXECUTABLE" not in dict(plain.defines)
