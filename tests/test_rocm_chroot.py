"""The rocm recipe against a real ROCm: Debian sid's 6.4, in a chroot (this host's Debian 12
ships ROCm 5.2, and sid's compiler does not run on its glibc).

The CI-sized part of the ROCm validation: the chroot is made by scripts/rocm-sid-chroot.sh
(about 4 min and 6 GB the first time), then scripts/rocm-configure-check.sh runs the
project's own policy and plan in it, configures the HIP unit from a clean CMake cache and
compiles one HIP translation unit. The whole compile, bundle and verify is a recorded run
(scripts/rocm-validate.sh, docs/rocm.md): about an hour on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO, TEST_CACHE

pytestmark = pytest.mark.slow
CHROOT = TEST_CACHE / "sid-rocm"


@pytest.fixture(scope="module")
def sid_chroot():
    if os.geteuid() != 0:
        pytest.skip("needs root (debootstrap, chroot, bind mounts); CI runs as root")
    assert shutil.which("debootstrap"), "debootstrap missing: scripts/ci-setup.sh installs it"
    proc = subprocess.run([str(REPO / "scripts" / "rocm-sid-chroot.sh"), str(CHROOT)], capture_output=True,
                          text=True, timeout=3000)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(CHROOT)
    return CHROOT


def test_configure_and_one_hip_object_for_gfx1100_with_sids_rocm(sid_chroot, tmp_path):
    report_file = tmp_path / "report.json"
    env = dict(os.environ, ASSEMBLE_CACHE=str(TEST_CACHE / "cache"), ROCM_CHECK_TARGETS="gfx1100 gfx1201",
               ROCM_CHECK_CONFIGURE="gfx1100")
    proc = subprocess.run([str(REPO / "scripts" / "rocm-configure-check.sh"), str(sid_chroot), "--json",
                           str(report_file)], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(report_file.read_text())
    install = report["rocm_install"]
    assert install and tuple(int(x) for x in install["version"].split(".")[:2]) >= (6, 1), install

    unit = report["units"]["gfx1100"]
    policy = unit["policy"]
    assert policy["targets"] == ["gfx1100"] and "gfx1100" in policy["rocblas_archs"]
    command = unit["configure_command"]
    for piece in ("-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1100", "-DAMDGPU_TARGETS=gfx1100", "-DGGML_HIP_RCCL=OFF",
                  f"-DCMAKE_HIP_COMPILER={policy['hip_compiler']}", "-DGGML_BACKEND_DL=ON"):
        assert piece in command, piece
    for flag in policy["hip_flags"]:
        assert flag in command
    configured = unit["configure"]
    assert configured["returncode"] == 0, configured
    assert "Clang" in (configured["found"]["hip_compiler_id"] or "")
    assert configured["found"]["GGML_HIP_RCCL"] == "OFF"
    assert configured["found"]["hip_version"].startswith(install["version"].split(".")[0])
    assert configured["objects"]["hip"] > 100            # ggml-cuda's sources compiled as HIP
    obj = unit["object"]
    assert obj["returncode"] == 0, obj
    assert obj["offload_archs"] == ["gfx1100"] and not obj["compressed"]   # exactly the one target

    # gfx1201 (RX 9070): refused before CMake unless this sid's rocBLAS has grown kernels for it
    other = report["units"]["gfx1201"]
    if "refused" in other:
        assert "has no kernels for gfx1201" in other["refused"] and "--rocm-path" in other["refused"]
        assert "configure" not in other
    else:
        assert "gfx1201" in other["policy"]["rocblas_archs"]
