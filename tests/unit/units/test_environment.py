"""The build runs in an explicit environment: the same plan compiles the same code whatever the
caller exported (SOURCE_DATE_EPOCH, CFLAGS, CC, ...), and what can still matter is in the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.units.environment import build_env, why_scrubbed
from builder.units.plan import plan_unit
from builder.config import cpulevels
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe, parse_recipe
from builder.errors import AssembleError
from builder.proc import OuterSteps
from tests.unit.units.test_plan import TOOLS, TREE

BASE = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "CCACHE_DIR": "/c", "SSH_AUTH_SOCK": "/s"}
HOSTILE = {"SOURCE_DATE_EPOCH": "1700000000", "CFLAGS": "-march=native", "CC": "/opt/weird/gcc",
           "CMAKE_BUILD_TYPE": "Debug", "NVCC_APPEND_FLAGS": "-G", "CPATH": "/opt/inc", "GIT_DIR": "/elsewhere"}


def _plan(environ: dict, recipe: str = "cpu"):
    r = load_recipe(recipe)
    config = resolve(r, CliOptions(), env={})
    return plan_unit(config, config.units[0], TOOLS, TREE, r.pin.sha, environ=environ)


def test_result_changing_variables_never_reach_the_build(isolated_cache):
    quiet, noisy = _plan(BASE), _plan({**BASE, **HOSTILE})
    assert quiet.key == noisy.key and quiet.build_dir == noisy.build_dir    # the same stamp, the same folder
    assert quiet.configure == noisy.configure
    seen = noisy.environment.mapping()
    assert not set(HOSTILE) & set(seen)
    assert seen["PATH"] == BASE["PATH"] and seen["CCACHE_DIR"] == "/c" and "SSH_AUTH_SOCK" not in seen
    assert set(noisy.environment.scrubbed) == set(HOSTILE)
    line, serious = noisy.environment.notice()
    assert "CFLAGS" in line and "[cmake.defines]" in line and serious
    assert build_env({"SOURCE_DATE_EPOCH": "1"}).notice()[1] is False      # expected in a release pipeline
    assert _plan(BASE).environment.notice() is None
    # the compilers are named in the plan, never left to CC/CXX
    d = dict(noisy.defines)
    assert d["CMAKE_C_COMPILER"] == TOOLS.cc.path and d["CMAKE_CXX_COMPILER"] == TOOLS.cxx.path


def test_variables_that_can_change_tool_libraries_are_in_the_key(isolated_cache):
    a, b = _plan({**BASE, "LD_LIBRARY_PATH": "/opt/a"}), _plan({**BASE, "LD_LIBRARY_PATH": "/opt/b"})
    assert a.key != b.key
    assert a.environment.as_dict()["keyed"] == {"LD_LIBRARY_PATH": "/opt/a"}
    # values of passed variables are never recorded (a remote cache's password may be among them)
    rec = _plan({**BASE, "SCCACHE_REDIS": "redis://:secret@h"}).environment.as_dict()
    assert "SCCACHE_REDIS" in rec["passed"] and "secret" not in repr(rec)


def test_container_units_see_none_of_the_callers_environment(isolated_cache):
    r = load_recipe("cuda128-vulkan")
    config = resolve(r, CliOptions(), env={})
    unit = next(u for u in config.units if u.where.kind == "container")
    p = plan_unit(config, unit, TOOLS, TREE, r.pin.sha, environ={**BASE, **HOSTILE})
    assert p.environment.mapping() == {} and p.environment.scrubbed == ()


def test_every_scrubbed_name_says_where_its_job_is_done():
    for name in HOSTILE:
        assert why_scrubbed(name)
    assert why_scrubbed("CMAKE_TOOLCHAIN_FILE") and why_scrubbed("PATH") is None


def test_all_variants_pin_every_instruction_set_option(isolated_cache):
    d = dict(_plan(BASE).defines)
    assert d["GGML_CPU_ALL_VARIANTS"] == "ON" and d["GGML_NATIVE"] == "OFF" and d["GGML_BACKEND_DL"] == "ON"
    for feature in cpulevels.FEATURES:
        assert d[f"GGML_{feature}"] == "OFF"    # each variant sets its own; the cache never follows the host


def _recipe(tmp_path: Path, cpu: str, extra: str = ""):
    return parse_recipe(tmp_path / "r.toml", f'''name = "r"
description = "d"
backends = ["cpu"]
[pin]
sha = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
[[pin.mirrors]]
kind = "git"
url = "https://example.org/llama.cpp.git"
{cpu}
{extra}''')


def test_one_named_level_sets_exactly_its_options(tmp_path, isolated_cache):
    r = _recipe(tmp_path, '[cpu]\nvariants = "haswell"')
    assert "cpu-all-variants" not in r.pin.features
    d = dict(resolve(r, CliOptions(), env={}).units[0].cmake_defines())
    assert d["GGML_CPU_ALL_VARIANTS"] == "OFF"
    on = {k for k, v in d.items() if k.removeprefix("GGML_") in cpulevels.FEATURES and v == "ON"}
    assert on == {"GGML_SSE42", "GGML_AVX", "GGML_F16C", "GGML_FMA", "GGML_AVX2", "GGML_BMI2"}
    assert "cpu-all-variants" in _recipe(tmp_path, "").pin.features      # the default needs it of the tree


@pytest.mark.parametrize("cpu,extra,cli,words", [
    ('[cpu]\nvariants = "single"', "", {}, ["cpu.variants", "haswell"]),
    ('[cpu]\nvariants = "avx9000"', "", {}, ["cpu.variants", "sapphirerapids"]),
    ("", '[cmake.defines]\nGGML_AVX2 = "ON"', {}, ["GGML_AVX2", "[cpu] variants"]),
    ("", "", {"defines": (("GGML_AVX512", "ON"),)}, ["GGML_AVX512", "--define"]),
    ("", '[cmake.defines]\nGGML_BACKEND_DL = "OFF"', {}, ["GGML_BACKEND_DL", "haswell"]),
])
def test_cpu_refusals_are_one_line(tmp_path, isolated_cache, cpu, extra, cli, words):
    with pytest.raises(AssembleError) as err:
        resolve(_recipe(tmp_path, cpu, extra), CliOptions(**cli), env={})
    e = err.value
    text = f"{e.what} | {e.where} | {e.fix}"
    assert all(w in text for w in words) and "\n" not in text, text


def test_nested_ninja_counters_do_not_move_the_bar():
    steps = OuterSteps()
    seen = [(d, t) for d, t in [(1, 691), (64, 691), (1, 2), (2, 2), (65, 691), (700, 700)] if steps.accept(d, t)]
    assert seen == [(1, 691), (64, 691), (65, 691), (700, 700)]
