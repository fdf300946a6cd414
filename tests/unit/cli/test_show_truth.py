"""`assemble show` never prints a placeholder as a runnable command line, and says when this
host's `build` would refuse a unit, in the words of the very check build runs (build_flow._enforce)."""

from __future__ import annotations

import json

import pytest

from builder.flows import build as build_flow
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.config.targets import GfxTarget
from builder.units.plan import plan_unit
from builder.errors import AssembleError
from builder.toolchain import rules, survey
from tests.support.common import assemble
from tests.support.rocmtrees import amd_rocm


def _build_refusal(rocm_path: str, target: str) -> AssembleError:
    """What `build --recipe rocm --hip-target TARGET --rocm-path DIR` raises before CMake, on this host."""
    config = resolve(load_recipe("rocm"), CliOptions(hip_target=GfxTarget.parse(target), rocm_path=rocm_path))
    units = config.wanted()
    toolchains = survey.for_units(config, units, probe_images=False)
    with pytest.raises(AssembleError) as err:
        build_flow._enforce(config, units, toolchains, rules.blackwell_patch_state((), ()))
    return err.value


def _show(*args: str) -> tuple[str, str]:
    proc = assemble("show", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def test_no_rocm_placeholders_are_commented_out_and_the_refusal_is_said(isolated_cache, tmp_path):
    empty = tmp_path / "no-rocm"
    empty.mkdir()
    refusal = _build_refusal(str(empty), "gfx1201")
    out, err = _show("rocm", "--hip-target", "gfx1201", "--rocm-path", str(empty))
    cmake_lines = [ln for ln in out.splitlines() if "-DGGML_HIP=ON" in ln or "--build" in ln]
    assert len(cmake_lines) == 2 and all(ln.lstrip().startswith("# ") for ln in cmake_lines)
    assert "not runnable as shown" in out and "-DCMAKE_HIP_COMPILER=<no HIP compiler found>" in out
    # no line a user could copy and run carries a placeholder: not a cmake line, not an env line
    assert "  # env ROCM_PATH=<no ROCm found>" in out.splitlines()
    assert not [ln for ln in out.splitlines() if "<" in ln and not ln.lstrip().startswith("# ")]
    assert "warning:" in err and refusal.what in err and refusal.fix in err

    unit = json.loads(_show("rocm", "--hip-target", "gfx1201", "--rocm-path", str(empty), "--json")[0])["units"][0]
    assert unit["runnable"] is False and "-DCMAKE_HIP_COMPILER=<no HIP compiler found>" in unit["placeholders"]
    assert unit["refused_here"]["means"] == refusal.what and unit["refused_here"]["fix"] == refusal.fix


def test_a_rocm_older_than_the_card_needs_is_named_like_build_names_it(isolated_cache, tmp_path):
    root = amd_rocm(tmp_path / "rocm-6.3", version="6.3.4", hipconfig=False, rocblas=("gfx1100", "gfx1201"),
                    hipblaslt=("gfx1100", "gfx1201"))
    refusal = _build_refusal(str(root), "gfx1201")
    assert "older than 6.4" in refusal.what
    out, err = _show("rocm", "--hip-target", "gfx1201", "--rocm-path", str(root))
    assert refusal.what in err and f"-DCMAKE_HIP_COMPILER={root}/llvm/bin/clang" in out
    shown = json.loads(_show("rocm", "--hip-target", "gfx1201", "--rocm-path", str(root), "--json")[0])
    assert shown["units"][0]["refused_here"]["means"] == refusal.what
    # the same ROCm for a card it supports: nothing to refuse
    ok = json.loads(_show("rocm", "--hip-target", "gfx1100", "--rocm-path", str(root), "--json")[0])["units"][0]
    assert ok["refused_here"] is None


def test_a_cpu_unit_with_the_tree_not_fetched_marks_only_the_source_path(isolated_cache):
    _out, err = _show("cpu")
    assert "warning" not in err
    unit = json.loads(_show("cpu", "--json")[0])["units"][0]
    assert unit["refused_here"] is None
    assert unit["placeholders"] == ["<cache>/trees/<sha>-<patch set>/src"] and unit["runnable"] is False


@pytest.mark.parametrize("launcher, url", [("none", "redis://cache.internal"), ("ccache", "s3://bucket/prefix")])
def test_a_remote_cache_build_would_refuse_is_said(isolated_cache, tmp_path, launcher, url):
    """build refuses a cache the unit's launcher cannot use (build_flow._check_remote_cache) before it
    compiles: show says so in the same words, and --json's refused_here carries it."""
    config = resolve(load_recipe("cpu"), CliOptions(remote_cache=url, launcher=launcher), env={})
    units = config.wanted()
    toolchains = survey.for_units(config, units, probe_images=False)
    plan = plan_unit(config, units[0], toolchains[units[0].name], tmp_path / "src", "0" * 40)
    with pytest.raises(AssembleError) as err:
        build_flow._check_remote_cache(config, [plan], toolchains, adopted=set())
    refusal = err.value
    _out, shown = _show("cpu", "--launcher", launcher, "--remote-cache", url)
    assert "warning:" in shown and refusal.what in shown and refusal.fix in shown
    unit = json.loads(_show("cpu", "--launcher", launcher, "--remote-cache", url, "--json")[0])["units"][0]
    assert unit["refused_here"]["means"] == refusal.what and unit["refused_here"]["fix"] == refusal.fix
    # a launcher that takes it: nothing to refuse
    fine = json.loads(_show("cpu", "--launcher", "sccache", "--remote-cache", url, "--json")[0])["units"][0]
    assert fine["refused_here"] is None
