"""The CUDA toolkit policy, against the real local nvcc (13.x) and stand-in nvccs that
report 12.8 and 12.6 exactly the way NVIDIA's nvcc prints them; plus the Blackwell
patch itself, applied with git to a copy of the pinned tree's file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.config.recipe import parse_recipe
from builder.config.targets import CudaArch
from builder.config.versions import satisfies
from builder.toolchain import rules
from builder.source import patches
from tests.support.toolkits import check_cuda_unit
from builder.errors import AssembleError

from builder.toolchain.detect import cuda_toolkit
from tests.support.common import GOOD_RECIPE, REPO

PIN = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

# `nvcc --list-gpu-arch` of the real releases (12.8 added sm_100/101/120, 12.9 sm_103/121).
ARCHS = {
    "12.6": "50 52 53 60 61 62 70 72 75 80 86 87 89 90",
    "12.8": "50 52 53 60 61 62 70 72 75 80 86 87 89 90 100 101 120",
}


def fake_toolkit(root: Path, version: str, cublas: str = "dev") -> Path:
    """A CUDA root whose nvcc answers --version/--list-gpu-arch/--dryrun like NVIDIA's."""
    (root / "bin").mkdir(parents=True)
    archs = "\\n".join(f"compute_{a}" for a in ARCHS[version].split())
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"""#!/bin/sh
case "$1" in
  --version) printf 'nvcc: NVIDIA (R) Cuda compiler driver\\nCuda compilation tools, release {version}, V{version}.93\\nBuild cuda_{version}.r{version}/compiler.35583870_0\\n' ;;
  --list-gpu-arch) printf '{archs}\\n' ;;
  --dryrun) echo "#\\$ TOP={root}" >&2 ;;
  *) exit 1 ;;
esac
""")
    nvcc.chmod(0o755)
    lib = root / "targets" / "x86_64-linux" / "lib"
    inc = root / "targets" / "x86_64-linux" / "include"
    lib.mkdir(parents=True)
    inc.mkdir(parents=True)
    (root / "lib64").symlink_to("targets/x86_64-linux/lib")
    (root / "include").symlink_to("targets/x86_64-linux/include")
    if cublas in ("dev", "runtime"):
        (lib / "libcublas.so.12").write_bytes(b"\x7fELF")
    if cublas == "dev":
        (lib / "libcublas.so").symlink_to("libcublas.so.12")
        (inc / "cublas_v2.h").write_text("/* cuBLAS */\n")
    return root


@pytest.fixture
def cuda128(tmp_path):
    return cuda_toolkit(str(fake_toolkit(tmp_path / "cuda-12.8", "12.8")))


@pytest.fixture
def real_cuda13():
    tk = cuda_toolkit()
    if tk is None or int(tk.version.split(".")[0]) < 13:
        pytest.skip(f"needs the local CUDA >= 13 nvcc (found {tk.version if tk else 'none'})")
    return tk


def test_stand_in_is_read_like_a_real_toolkit(cuda128, tmp_path):
    assert cuda128.version == "12.8"
    assert "120" in map(str, cuda128.archs) and "121" not in map(str, cuda128.archs)
    assert cuda128.has_cublas
    assert Path(cuda128.root) == (tmp_path / "cuda-12.8").resolve()


def test_real_cuda13_with_blackwell_is_refused_with_three_ways_out(real_cuda13):
    with pytest.raises(AssembleError) as err:
        check_cuda_unit(real_cuda13, ["89", "120"], accept_regression=False, patched_fattn=False,
                        where="recipes/cuda.toml: units[0]")
    e = err.value
    assert e.code == 2
    assert f"CUDA {real_cuda13.version}" in e.what and "sm_120" in e.what and "50-80%" in e.what
    assert e.where == "recipes/cuda.toml: units[0]"
    # the three ways out and the explicit acceptance, all in the one-line fix
    assert "assemble toolchain cuda 12.8.1" in e.fix and "cuda128-vulkan" in e.fix
    assert rules.BLACKWELL_PATCH in e.fix
    assert "Vulkan" in e.fix
    assert "--accept-blackwell-regression" in e.fix
    assert "\n" not in e.line()


@pytest.mark.parametrize("arch", ["120a", "121", "120-real", "sm_120"])
def test_every_spelling_of_blackwell_is_caught(real_cuda13, arch):
    with pytest.raises(AssembleError):
        check_cuda_unit(real_cuda13, [arch], accept_regression=False, patched_fattn=False, where="w")


def _allowed(tk, state, **kw):
    """An allowed Blackwell build on the real toolkit; its cuBLAS decides whether it goes through."""
    if not tk.has_cublas:  # the local 13.x install may lack cuBLAS: then that refusal comes next
        with pytest.raises(AssembleError, match="cuBLAS"):
            check_cuda_unit(tk, ["89", "120"], where="w", **kw)
        return None
    result = check_cuda_unit(tk, ["89", "120"], where="w", **kw)
    assert result.blackwell_regression == state
    return result


def test_real_cuda13_accepted_or_patched_gets_past_the_blackwell_rule(real_cuda13):
    _allowed(real_cuda13, "accepted", accept_regression=True, patched_fattn=False)
    _allowed(real_cuda13, "patched", accept_regression=False, patched_fattn=True)
    _allowed(real_cuda13, "patched", accept_regression=True, patched_fattn=True)


def test_real_cuda13_without_blackwell_is_not_affected(real_cuda13):
    if real_cuda13.has_cublas:
        r = check_cuda_unit(real_cuda13, ["89", "90"], accept_regression=False, patched_fattn=False, where="w")
        assert r.blackwell_regression == "not-applicable"
    else:
        with pytest.raises(AssembleError, match="no cuBLAS"):
            check_cuda_unit(real_cuda13, ["89", "90"], accept_regression=False, patched_fattn=False, where="w")


def test_cuda128_builds_blackwell_with_nothing_to_accept(cuda128):
    r = check_cuda_unit(cuda128, ["80", "89", "120"], accept_regression=False, patched_fattn=False, where="w",
                        constraint="==12.8")
    assert r.blackwell_regression == "not-applicable" and r.note is None
    # a plain 120 is built as ggml builds it, 120a (config.targets.CudaArch.as_ggml_builds)
    assert r.as_manifest() == {"toolkit": "12.8", "root": cuda128.root, "archs": ["80", "89", "120a"],
                               "blackwell_targets": ["120a"], "blackwell_regression": "not-applicable"}


def test_manifest_record_of_an_accepted_regression(tmp_path):
    # the same 13.x decision on a stand-in that has cuBLAS: the record the manifest gets
    root = fake_toolkit(tmp_path / "c", "12.8")
    tk = cuda_toolkit(str(root))
    tk13 = dataclasses.replace(tk, version="13.0", archs=tk.archs + (CudaArch.parse("121"),))
    r = check_cuda_unit(tk13, ["120", "121"], accept_regression=True, patched_fattn=False, where="w")
    assert r.as_manifest()["blackwell_regression"] == "accepted"
    assert r.as_manifest()["blackwell_targets"] == ["120a", "121a"]
    assert "accepted" in r.note and "12.8" in r.note


def test_sm121_needs_a_newer_toolkit_than_12_8(cuda128):
    with pytest.raises(AssembleError) as err:
        check_cuda_unit(cuda128, ["121"], accept_regression=False, patched_fattn=False, where="w")
    assert "cannot target sm_121" in err.value.what and "12.9" in err.value.fix


def test_sm120_refused_on_cuda_12_6(tmp_path):
    tk = cuda_toolkit(str(fake_toolkit(tmp_path / "c126", "12.6")))
    assert tk.version == "12.6"
    with pytest.raises(AssembleError) as err:
        check_cuda_unit(tk, ["89", "120"], accept_regression=True, patched_fattn=True, where="recipes/x.toml")
    assert err.value.code == 2
    assert "CUDA 12.6" in err.value.what and "sm_120" in err.value.what and "newest it knows: sm_90" in err.value.what
    assert "12.8" in err.value.fix


def test_family_targets_need_12_9(cuda128):
    with pytest.raises(AssembleError, match="family-specific"):
        check_cuda_unit(cuda128, ["120f"], accept_regression=False, patched_fattn=False, where="w")
    assert check_cuda_unit(cuda128, ["120a"], accept_regression=False, patched_fattn=False, where="w")


@pytest.mark.parametrize("cublas", ["none", "runtime"])
def test_missing_cublas_is_refused(tmp_path, cublas):
    tk = cuda_toolkit(str(fake_toolkit(tmp_path / "c", "12.8", cublas=cublas)))
    assert not tk.has_cublas
    with pytest.raises(AssembleError) as err:
        check_cuda_unit(tk, ["89"], accept_regression=False, patched_fattn=False, where="w")
    assert "cuBLAS" in err.value.what and "assemble toolchain cuda" in err.value.fix
    assert ("runtime" in err.value.what) == (cublas == "runtime")


def test_no_toolkit_and_unknown_arch(cuda128):
    with pytest.raises(AssembleError, match="no CUDA toolkit"):
        check_cuda_unit(None, ["89"], accept_regression=False, patched_fattn=False, where="w")
    with pytest.raises(AssembleError, match="not a CUDA architecture"):
        check_cuda_unit(cuda128, ["native"], accept_regression=False, patched_fattn=False, where="w")


def test_recipe_constraint(cuda128, real_cuda13):
    with pytest.raises(AssembleError) as err:
        check_cuda_unit(real_cuda13, ["89"], accept_regression=False, patched_fattn=False, where="w",
                        constraint="==12.8")
    assert "does not satisfy" in err.value.what and "cuda12.8-build" in err.value.fix
    assert check_cuda_unit(cuda128, ["89"], accept_regression=False, patched_fattn=False, where="w",
                           constraint=">=12.4,<13")


@pytest.mark.parametrize("version,constraint,ok", [
    ("12.8", "==12.8", True), ("12.8", "==12", True), ("12.8", "==12.6", False), ("13.0", ">=13", True),
    ("12.9", ">=13", False), ("12.8", ">=12.4,<13", True), ("13.0", "<13", False), ("13.0", "!=13.0", False),
    ("12.8", "12.8", True)])
def test_satisfies(version, constraint, ok):
    assert satisfies(version, constraint) is ok


def test_a_bad_constraint_is_refused_when_the_recipe_is_read(tmp_path):
    text = GOOD_RECIPE.replace('[cuda]\n', '[cuda]\ntoolkit = "~12"\n')
    with pytest.raises(AssembleError) as err:
        parse_recipe(tmp_path / "r.toml", text)
    assert "cuda.toolkit" in err.value.line() and "'~12'" in err.value.line() and ">=12.4,<13" in err.value.line()


# --- the Blackwell patch ------------------------------------------------------

def test_patch_metadata_conditions():
    meta = REPO / "patches" / f"{rules.BLACKWELL_PATCH}.toml"
    p = patches.load_patch(meta)
    assert "50-80%" in p.fixes
    ctx = lambda v, archs: patches.PatchContext(backends=("cuda", "cpu"), cuda_version=v,  # noqa: E731
                                                cuda_archs=tuple(map(CudaArch.parse, archs)), backend_dl=True)
    assert patches.unmet_condition(p.when, ctx("13.0", ("89", "120"))) is None
    assert patches.unmet_condition(p.when, ctx("13.1", ("121",))) is None
    assert patches.unmet_condition(p.when, ctx("12.8", ("120",))) is not None      # 12.8 needs no patch
    assert patches.unmet_condition(p.when, ctx("13.0", ("89", "90"))) is not None  # no Blackwell target
    assert patches.unmet_condition(p.when, ctx(None, ())) is not None


