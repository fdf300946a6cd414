"""The ROCm rules on Debian sid's real packages (slow tier: the downloads, cached per machine)."""

from __future__ import annotations

import pytest

from builder.toolchain.detect import _multiarch, rocm
from tests.support.rocmdev import rocm_dev_tree
from tests.support.rocmtrees import SID_ROCBLAS, _clang, _data, _exe, amd_rocm, debian_rocm  # noqa: F401
from tests.support.tiers import downloads
from tests.unit.toolchain.test_rules_rocm import ok, refused  # shared with the quick tier


# cold: rocm_libs (see test_bundle_vendor's `rocm`) plus sid's ROCm -dev .debs (11 MB, hard-linked tree:
# seconds more), prefetched; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=rocm_dev_tree)
def sid():
    from scripts.support.vendorlibs import get_or_skip
    return get_or_skip(rocm_dev_tree)


def test_sid_layout_is_read_by_the_real_probe(sid):
    inst = rocm(str(sid.usr))
    assert inst is not None and inst.version.startswith("6.4.")
    assert inst.hipconfig == str(sid.usr / "bin" / "hipconfig")
    assert inst.rocblas_data == str(sid.usr / "lib" / _multiarch() / "rocblas" / "4.4.1" / "library")
    assert inst.hipblas and inst.rocblas and inst.hip_lib


def test_sid_gfx1100_passes_with_its_own_clang_and_device_libs(sid):
    r = ok(rocm(str(sid.usr)), ["gfx1100"])
    assert r["hip_compiler"] == str(sid.usr / "lib" / "llvm-21" / "bin" / "clang")
    bitcode = sid.usr / "lib" / "llvm-21" / "lib" / "clang" / "21" / "amdgcn" / "bitcode"
    assert r["device_libs"] == str(bitcode) and (bitcode / "ockl.bc").is_file()
    assert r["hip_flags"] == [f"--rocm-device-lib-path={bitcode}"]
    assert r["rocblas_archs"] == list(SID_ROCBLAS)     # gfx803 .. gfx1102, as sid ships it


@pytest.mark.parametrize("target", ["gfx1201", "gfx1200", "gfx1151"])
def test_sid_rocblas_lacks_rdna4_and_strix_halo(sid, target):
    e = refused(rocm(str(sid.usr)), [target])
    assert f"no kernels for {target}" in e.what and ", ".join(SID_ROCBLAS) in e.what
