"""The CUDA runtime version read from NVIDIA's real wheels (slow tier: the download)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.runtime.cudart import runtime_version
from builder.runtime.gpuruntime import describe
from tests.support.tiers import downloads
from scripts.support.vendorlibs import cuda_libs, get_or_skip


# cold: the same cache as test_bundle_vendor's `cuda` (whichever runs first pays, about 1 min), warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=cuda_libs)
def cuda():
    """NVIDIA's CUDA 13 wheels (libcudart.so.13: no minor in the name), unpacked once per machine."""
    return get_or_skip(cuda_libs)


def _called(lib: Path) -> int:
    """What cudaRuntimeGetVersion() returns when the library is loaded and called (no driver needed)."""
    code = ("import ctypes, sys; v = ctypes.c_int(); l = ctypes.CDLL(sys.argv[1]); "
            "assert l.cudaRuntimeGetVersion(ctypes.byref(v)) == 0; print(v.value)")
    return int(subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True, text=True,
                              check=True).stdout)


def test_the_wheels_cudart_states_its_version_in_its_code(cuda, tmp_path):
    lib = cuda.libdir / "libcudart.so.13"
    value = _called(lib)
    assert runtime_version(lib) == f"{value // 1000}.{value % 1000 // 10}"
    (tmp_path / "lib").mkdir()
    shutil.copyfile(lib, tmp_path / "lib" / "libcudart.so.13")
    g = describe(tmp_path, ["lib/libcudart.so.13", "bin/llama-server"], {"cuda": "12.8"})
    # the library, not the toolkit the units were built with nor its file name, says which runtime it is
    assert g.cuda.version == runtime_version(lib) and g.cuda.version.startswith("13.")
    assert g.cuda.driver_min.startswith("580") and g.cuda.source and "not carried" not in " ".join(g.notes)
