"""The fixes `doctor` and `build` name work with what the build really runs.

cuBLAS: NVIDIA's PyPI wheel is no fix for linking (FindCUDAToolkit does not take it), so no hint
names it. Vulkan on Debian 12: bookworm's packages are too old, so the fix is Debian 13's headers,
laid where CMake looks unaided -- what scripts/ci-setup.sh does on this Debian 12 host."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.toolchain import detect, hints, rules
from builder.toolchain.detect import Distro

REPO = Path(__file__).resolve().parents[3]
DEBIAN12 = Distro("debian", (), "12", "bookworm")

# exactly what nvidia-cublas 13.1.1.3 (PyPI) unpacks into site-packages
WHEEL_FILES = ("nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/lib/libcublasLt.so.13",
               "nvidia/cu13/include/cublas_v2.h", "nvidia/cu13/include/cublas_api.h")

PROJECT = """cmake_minimum_required(VERSION 3.21)
project(probe LANGUAGES C)
find_package(CUDAToolkit REQUIRED)
if(TARGET CUDA::cublas)
  message(STATUS "CUDA::cublas defined: ${CUDA_cublas_LIBRARY}")
else()
  message(STATUS "CUDA::cublas undefined")
endif()
"""


def _toolkit_without_cublas() -> detect.CudaToolkit:
    for root in ("/usr/local/cuda-13.0", "/usr/local/cuda"):
        tk = detect.cuda_toolkit(root) if Path(root, "bin", "nvcc").is_file() else None
        if tk is not None and not tk.has_cublas:
            return tk
    pytest.skip("needs a real CUDA toolkit without cuBLAS (this host's /usr/local/cuda-13.0)")


def test_findcudatoolkit_does_not_take_cublas_from_the_pypi_wheel(tmp_path):
    """The wheel's libcublas.so.13 beside a toolkit without cuBLAS: CUDA::cublas stays undefined
    whether the wheel's folders are on CMAKE_LIBRARY_PATH or CMAKE_PREFIX_PATH."""
    tk = _toolkit_without_cublas()
    site = tmp_path / "site-packages"
    for name in WHEEL_FILES:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(b"\x7fELF" if ".so" in name else b"/* cuBLAS */\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "CMakeLists.txt").write_text(PROJECT)
    cmake = shutil.which("cmake")
    for extra in (f"-DCMAKE_LIBRARY_PATH={site / 'nvidia/cu13/lib'}", f"-DCMAKE_PREFIX_PATH={site / 'nvidia/cu13'}"):
        b = tmp_path / f"b{len(extra)}"
        proc = subprocess.run([cmake, "-S", str(tmp_path / "p"), "-B", str(b), f"-DCUDAToolkit_ROOT={tk.root}", extra],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert "CUDA::cublas undefined" in proc.stdout, proc.stdout
    # so neither doctor nor build may send anyone there
    for distro in (DEBIAN12, Distro("fedora", (), "41"), Distro("")):
        fix = hints.cublas_hint(tk, distro)
        assert "pip" not in fix and "wheel" not in fix and "assemble toolchain cuda" in fix


def test_debian12_vulkan_fix_is_what_this_hosts_setup_does():
    """One fix for headers, loader and SPIRV-Headers; it names Debian 13's packages as
    scripts/ci-setup.sh takes them, and the headers that script lays down build the pinned ggml."""
    fix = hints.debian12_vulkan_fix()
    assert all(hints.install_hint(c, DEBIAN12) == fix for c in ("vulkan-headers", "vulkan-loader", "spirv-headers"))
    setup = (REPO / "scripts" / "ci-setup.sh").read_text()
    assert "Suites: trixie" in setup and re.search(r"download libvulkan-dev spirv-headers\)", setup)
    assert "dpkg -x \"$f\" /" in setup
    assert "apt-get download libvulkan-dev spirv-headers" in fix and "`dpkg -x` each .deb into /" in fix
    assert hints.DEBIAN12_VULKAN in fix and hints.DEBIAN13_VULKAN in fix
    assert rules.VULKAN_TESTED == hints.DEBIAN13_VULKAN
    # the probe build and doctor share reads this host's real headers (laid down by ci-setup.sh)
    sdk = detect.vulkan_sdk()
    assert sdk.header_version is not None, "scripts/ci-setup.sh installs Debian 13's Vulkan headers"
    assert detect.version_tuple(sdk.header_version) >= detect.version_tuple(hints.DEBIAN13_VULKAN)
    assert rules.header_lacks(sdk) == [] and sdk.spirv_headers


def test_debian12_rocm_fix_names_no_package_debian12_lacks():
    """bookworm has hipcc 5.2 and no libhipblas-dev/librocblas-dev; sid's need sid's glibc. The
    fix for both ROCm rows names what works there, and the scripts it names are in this repository."""
    fix = hints.install_hint("rocm", DEBIAN12)
    assert hints.install_hint("hipblas", DEBIAN12) == fix
    assert "apt install libhipblas-dev" not in fix and "apt install hipcc" not in fix
    assert "rocm-hip-sdk" in fix
    for script in re.findall(r"scripts/[\w.-]+\.sh", fix):
        assert (REPO / script).is_file(), script
    # other Debian releases keep their own words (sid's packages are named for sid)
    assert "sid" in hints.install_hint("hipblas", Distro("debian", (), "13"))
