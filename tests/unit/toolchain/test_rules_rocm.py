"""The ROCm policy a HIP unit passes before CMake runs.

Stand-in ROCm trees in both real layouts (AMD's /opt/rocm with llvm/bin/clang, and
Debian's /usr with a versioned LLVM and a versioned rocBLAS data folder), read by the
real toolchain.rocm() probe; then Debian sid's own packages (tests/rocmdev.py: cached
downloads from the archive), so the layout assumptions are checked against the real thing.
"""

from __future__ import annotations


import pytest

from builder.toolchain import detect
from builder.errors import AssembleError
from builder.toolchain.detect import kernel_archs
from tests.support.toolkits import check_hip_unit
from builder.toolchain.detect import rocm
from tests.support.rocmtrees import SID_ROCBLAS, _clang, _data, _exe, amd_rocm, debian_rocm  # noqa: F401


def refused(rocm_install, targets, **kw) -> AssembleError:
    kw.setdefault("multi_arch_risk", None)
    kw.setdefault("where", "recipes/rocm.toml: unit main")
    with pytest.raises(AssembleError) as err:
        check_hip_unit(rocm_install, targets, **kw)
    e = err.value
    assert e.code == 2 and e.fix and e.where
    assert "\n" not in e.line()
    return e


def ok(rocm_install, targets, **kw) -> dict:
    kw.setdefault("multi_arch_risk", None)
    return check_hip_unit(rocm_install, targets, where="w", **kw)


# --- the two layouts, read by the real probe ------------------------------------

def test_amd_layout_passes_and_records_what_configure_needs(tmp_path):
    root = amd_rocm(tmp_path / "opt-rocm")
    r = ok(rocm(str(root)), ["gfx1100"])
    assert r["rocm"] == "6.4.43484" and r["version_source"] == "hipconfig --version"
    assert r["path"] == str(root) and r["hip_compiler"] == str(root / "llvm" / "bin" / "clang")
    assert r["targets"] == ["gfx1100"] and r["rocblas_archs"] == ["gfx1030", "gfx1100"]
    assert r["rocblas_data"] == str(root / "lib" / "rocblas" / "library")
    assert r["device_libs"] == str(root / "amdgcn" / "bitcode") and r["hip_flags"] == []
    assert r["notes"] == []


def test_debian_layout_compiler_comes_from_hipconfig(tmp_path):
    root = debian_rocm(tmp_path / "usr", llvms=("17", "19"), hipclangpath="17")
    r = ok(rocm(str(root)), ["gfx1100"])
    assert r["hip_compiler"] == str(root / "lib" / "llvm-17" / "bin" / "clang")   # not the newer 19
    assert r["rocm"] == "6.4.43484" and r["version_source"].endswith("hip-config-version.cmake")
    assert r["rocblas_archs"] == list(SID_ROCBLAS)
    assert r["rocblas_data"].endswith("rocblas/4.4.1/library")
    # with ROCM_PATH=/usr, Debian's clang looks only in /usr/amdgcn/bitcode: the flag points it home
    bitcode = root / "lib" / "llvm-17" / "lib" / "clang" / "17" / "amdgcn" / "bitcode"
    assert r["device_libs"] == str(bitcode) and r["hip_flags"] == [f"--rocm-device-lib-path={bitcode}"]


def test_debian_layout_without_hipconfig_answer_takes_a_single_llvm(tmp_path):
    root = debian_rocm(tmp_path / "usr", llvms=("19",), hipclangpath=None)
    assert ok(rocm(str(root)), ["gfx1030"])["hip_compiler"] == str(root / "lib" / "llvm-19" / "bin" / "clang")


def test_debian_layout_never_guesses_among_several_llvms(tmp_path):
    root = debian_rocm(tmp_path / "usr", llvms=("17", "19"), hipclangpath=None)
    e = refused(rocm(str(root)), ["gfx1100"])
    assert "no HIP compiler" in e.what and "hipclangpath" in e.what and "lib/llvm-*/bin/clang" in e.what


def test_hipconfig_naming_a_missing_clang_is_not_trusted(tmp_path):
    root = debian_rocm(tmp_path / "usr", llvms=(), hipclangpath="17")
    e = refused(rocm(str(root)), ["gfx1100"])
    assert "no HIP compiler" in e.what and str(root) in e.what


def test_amd_layout_without_clang_is_refused(tmp_path):
    root = amd_rocm(tmp_path / "rocm", clang=False)
    e = refused(rocm(str(root)), ["gfx1100"])
    assert f"{root}/llvm/bin/clang" in e.what and "6.4" in e.what
    assert "rocm-llvm" in e.fix


def test_amd_6_2_layout_finds_bitcode_in_the_resource_dir(tmp_path):
    root = amd_rocm(tmp_path / "rocm", bitcode="llvm/lib/clang/19/lib/amdgcn/bitcode")
    r = ok(rocm(str(root)), ["gfx1100"])
    assert r["device_libs"] == str(root / "llvm/lib/clang/19/lib/amdgcn/bitcode")
    assert r["hip_flags"] == [f"--rocm-device-lib-path={r['device_libs']}"]


def test_no_device_library_is_refused(tmp_path):
    root = amd_rocm(tmp_path / "rocm", bitcode=None)
    e = refused(rocm(str(root)), ["gfx1100"])
    assert "no ROCm device library (ockl.bc)" in e.what and str(root / "llvm/bin/clang") in e.what
    assert "rocm-device-libs" in e.fix


# --- refusals ----------------------------------------------------------------------

def test_no_rocm_names_the_rocm_path_that_was_given(tmp_path):
    missing = tmp_path / "nowhere"
    assert rocm(str(missing)) is None
    e = refused(None, ["gfx1100"], rocm_path=str(missing))
    assert f"--rocm-path {missing}" in e.what and "--rocm-path" in e.fix and "ROCM_PATH" in e.fix


def test_no_rocm_names_every_place_searched(monkeypatch):
    from builder.config.options import resolve_places
    monkeypatch.setenv("ROCM_PATH", "/srv/rocm-a")
    monkeypatch.delenv("HIP_PATH", raising=False)
    place = resolve_places().rocm_path          # the environment names the place: only it is searched
    assert (place.value, place.origin) == ("/srv/rocm-a", "ROCM_PATH")
    assert rocm(place.value) is None
    e = refused(None, ["gfx1100"], rocm_path=place.value, rocm_origin=place.origin)
    assert "ROCM_PATH=/srv/rocm-a" in e.what and "/opt/rocm" not in e.what
    monkeypatch.delenv("ROCM_PATH")
    e = refused(None, ["gfx1100"])
    assert "ROCM_PATH (unset)" in e.what and "HIP_PATH (unset)" in e.what
    assert "/opt/rocm" in e.what and "/usr" in e.what and "hipconfig" in e.what


def test_old_rocm_is_refused_with_version_and_place(tmp_path):
    root = amd_rocm(tmp_path / "rocm-5.7", version="5.7.1", hipconfig=False)
    e = refused(rocm(str(root)), ["gfx1100"])
    assert "ROCm 5.7.1" in e.what and str(root) in e.what and "older than 6.1" in e.what
    assert ".info/version" in e.what     # says where the version came from


def test_6_1_is_the_first_accepted(tmp_path):
    assert ok(rocm(str(amd_rocm(tmp_path / "a", version="6.1.0"))), ["gfx1100"])["rocm"].startswith("6.1")
    refused(rocm(str(amd_rocm(tmp_path / "b", version="6.0.2"))), ["gfx1100"])


def test_unknown_version_is_refused(tmp_path):
    root = amd_rocm(tmp_path / "rocm", hipconfig=False)
    (root / ".info" / "version").unlink()
    e = refused(rocm(str(root)), ["gfx1100"])
    assert "cannot tell its version" in e.what


def test_missing_hipblas_is_refused(tmp_path):
    root = amd_rocm(tmp_path / "rocm")
    (root / "lib" / "libhipblas.so").unlink()
    assert "no hipBLAS library" in refused(rocm(str(root)), ["gfx1100"]).what


def test_target_rocblas_lacks_is_refused_with_what_it_has(tmp_path):
    root = debian_rocm(tmp_path / "usr")
    e = refused(rocm(str(root)), ["gfx1201"])
    assert "no kernels for gfx1201" in e.what
    assert "gfx803, gfx900, gfx906, gfx908, gfx90a, gfx1010, gfx1030, gfx1100, gfx1101, gfx1102" in e.what
    assert "first matrix multiply" in e.what and "TensileLibrary_lazy_gfx1201.dat" in e.fix


def test_rocblas_without_data_is_refused(tmp_path):
    root = amd_rocm(tmp_path / "rocm", rocblas=None)
    assert "rocBLAS has no kernel data" in refused(rocm(str(root)), ["gfx1100"]).what


def test_code_objects_without_an_index_do_not_count(tmp_path):
    root = amd_rocm(tmp_path / "rocm", rocblas=("gfx1100",))
    (root / "lib" / "rocblas" / "library" / "Kernels.so-000-gfx1030.hsaco").write_text("k")
    e = refused(rocm(str(root)), ["gfx1030"])
    assert "(it has: gfx1100)" in e.what


def test_two_targets_need_multi_arch_risk(tmp_path):
    inst = rocm(str(amd_rocm(tmp_path / "rocm")))
    e = refused(inst, ["gfx1030", "gfx1100"])
    assert "2 gfx targets" in e.what and "segfaults" in e.what and "multi_arch_risk" in e.fix
    r = ok(inst, ["gfx1030", "gfx1100"], multi_arch_risk="two cards, same runtime")
    assert r["targets"] == ["gfx1030", "gfx1100"] and r["multi_arch_risk"] == "two cards, same runtime"


def test_every_target_needs_rocblas_even_with_the_risk_stated(tmp_path):
    inst = rocm(str(amd_rocm(tmp_path / "rocm")))
    e = refused(inst, ["gfx1100", "gfx1201"], multi_arch_risk="yes")
    assert "gfx1201" in e.what and "gfx1100," not in e.what.split("(it has")[0]


def test_target_checks_come_before_looking_for_rocm():
    assert "no gfx target" in refused(None, []).what
    assert "'sm_90' is not a gfx target" in refused(None, ["sm_90"]).what


def test_feature_suffix_is_ignored_for_kernel_data(tmp_path):
    inst = rocm(str(amd_rocm(tmp_path / "rocm", rocblas=("gfx90a",), hipblaslt=("gfx90a",))))
    assert ok(inst, ["gfx90a:xnack-"])["targets"] == ["gfx90a:xnack-"]


def test_hipblaslt_without_the_target_is_only_a_note(tmp_path):
    inst = rocm(str(amd_rocm(tmp_path / "rocm", hipblaslt=("gfx1100",))))
    r = ok(inst, ["gfx1030"])
    assert r["hipblaslt_archs"] == ["gfx1100"]
    assert r["notes"] == ["hipBLASLt has no kernels for gfx1030: it falls back to slower ones"]


# --- reading data folders ------------------------------------------------------------

def test_kernel_archs_reads_every_index_form(tmp_path):
    f = tmp_path / "library"
    _data(f, ("gfx1100",))
    _data(f, ("gfx906",), lazy=False)
    (f / "gfx90a-xnack-").mkdir()
    (f / "gfx90a-xnack-" / "TensileLibrary.dat").write_text("i")
    (f / "gfx942").mkdir()                          # a folder with no index serves nothing
    assert kernel_archs(f) == ("gfx906", "gfx90a", "gfx1100")
    assert kernel_archs(tmp_path / "missing") == () and kernel_archs(None) == ()


def test_kernel_archs_with_an_arch_less_index(tmp_path):
    f = tmp_path / "library"
    f.mkdir()
    (f / "TensileLibrary.dat").write_text("i")
    (f / "TensileLibrary_gfx1030.co").write_text("k")
    assert kernel_archs(f) == ("gfx1030",)


def test_searched_places_follow_the_probe_order(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect.rocm_searched(None) == ["ROCM_PATH (unset)", "HIP_PATH (unset)", "hipconfig (not on PATH)",
                                              "/opt/rocm", "/usr"]
    assert detect.rocm_searched("/x") == ["--rocm-path /x"]
    assert detect.rocm_searched("/h", "HIP_PATH") == ["HIP_PATH=/h"]


# --- Debian sid's real packages (cached downloads, no chroot) -----------------------


# --- the per-card ROCm floor (rules.ROCM_SINCE): one table for build, doctor and matrix ----------

@pytest.mark.parametrize("target, rocm_version, accepted, floor", [
    ("gfx1100", "6.1.0", True, "6.1"),     # RDNA3: ggml's own floor
    ("gfx942", "6.1.0", True, "6.1"),
    ("gfx1201", "6.3.4", False, "6.4"),    # RDNA4 (RX 9070): first supported by ROCm 6.4
    ("gfx1200", "6.3.4", False, "6.4"),    # RDNA4 (RX 9060 XT)
    ("gfx1201", "6.4.1", True, "6.4"),
    ("gfx1200", "6.4.0", True, "6.4"),
])
def test_each_card_asks_for_the_rocm_that_supports_it(tmp_path, target, rocm_version, accepted, floor):
    from builder.config.targets import GfxTarget
    from builder.release import matrix
    from builder.config.recipe import load_recipe
    from builder.toolchain.rules import rocm_floor_text

    install = rocm(str(amd_rocm(tmp_path / "r", version=rocm_version, hipconfig=False, rocblas=(target,),
                                  hipblaslt=(target,))))
    if accepted:
        assert ok(install, [target])["rocm"] == rocm_version
    else:
        e = refused(install, [target])
        assert f"ROCm {rocm_version}" in e.what and f"older than {floor}" in e.what and target in e.what
        assert f">= {floor}" in e.fix
    assert rocm_floor_text([GfxTarget.parse(target)]) == floor
    # matrix asks the runner for the same floor build enforces
    entry = next(iter(matrix.entries([load_recipe("rocm")], (GfxTarget.parse(target),))))
    assert entry.needs.rocm == f">={floor}"
