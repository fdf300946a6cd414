"""Licences of real vendor libraries and of the real cpu runtime (slow tier: downloads, the cpu build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.digest import sha256_file
from builder.prebuilt.inputs import classify, deb_owners, unpack
from builder.runtime import licenses
from builder.runtime.manifest import Manifest, check_files
from tests.support.tiers import downloads
from scripts.support.vendorlibs import SID, cuda_site, fetch_deb, get_or_skip
from tests.unit.runtime.test_licenses import GCC_EXCEPTION, _bundle, _manifest, _tree  # shared with the quick tier


# cold: the cached wheels pip-installed into a site folder (591 MB; under a minute, estimated, after
# the download `cuda` pays), prefetched; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=cuda_site)
def cuda_wheels():
    return get_or_skip(cuda_site)


def test_nvidia_wheels_carry_their_license_txt_under_nvidias_eula(tmp_path, cuda_wheels):
    lib = cuda_wheels.libdir
    # each library is used, so the linker records it even where it links --as-needed
    staged, placed = _bundle(tmp_path, [("", f"-L{lib}"),
                                        (("unsigned long cublasLtGetVersion(void);\n"
                                          "unsigned long use_lt(void) { return cublasLtGetVersion(); }\n"),
                                         "-l:libcublasLt.so.13"),
                                        (("int cudaRuntimeGetVersion(int *);\n"
                                          "int use_rt(int *v) { return cudaRuntimeGetVersion(v); }\n"),
                                         "-l:libcudart.so.13")],
                             search=[lib])
    carried = {Path(f.path).name for f in placed.files if f.role == "vendor"}
    assert {"libcublasLt.so.13", "libcudart.so.13"} <= carried
    m = _manifest(licenses.add_licenses(placed, staged, licenses.tree_license(_tree(tmp_path), ())))
    assert m.unlicensed() == []
    nvidia = [r for r in m.licenses if r.component.startswith("nvidia")]
    assert {r.component for r in nvidia} == {"nvidia-cublas", "nvidia-cuda-runtime"}
    for rec in nvidia:
        assert rec.spdx == "LicenseRef-NVIDIA-Software-License-Agreement" and rec.source.startswith("wheel ")
        assert any(Path(t).name == "License.txt" for t in rec.texts)
        for t in rec.texts:
            assert sha256_file(staged / t) == next(f.sha256 for f in m.files if f.path == t)
    assert check_files(staged, m) == []


ROCM_DEBS = ("libamdhip64-6", "libhsa-runtime64-1", "libhipblas2", "libroctx64-4", "libnuma1")


def rocm_debs() -> list:
    return [fetch_deb(SID[p]) for p in ROCM_DEBS]


# cold: five of rocm_libs' .debs (10 MB; shared with it), prefetched; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=rocm_debs)
def sid_debs():
    return get_or_skip(rocm_debs)


def test_rocm_debs_give_each_library_its_packages_copyright(tmp_path, sid_debs):
    (inp,) = classify([str(d) for d in sid_debs])
    root = unpack(inp, tmp_path / "debs")
    owners = deb_owners(inp, root)
    libs = sorted(k for k in owners if ".so" in Path(k).name)
    assert {owners[k].name for k in libs} == set(ROCM_DEBS)
    assert all(owners[k].version == SID[owners[k].name].version for k in libs)
    found = licenses.vendor_licenses([(f"lib/{Path(k).name}", k) for k in libs], known=owners)
    by = {s.component: s for s in found}
    assert set(by) == set(ROCM_DEBS) and sorted(p for s in found for p in s.covers) == \
        sorted(f"lib/{Path(k).name}" for k in libs)
    for name, src in by.items():
        assert src.texts == (root / "usr/share/doc" / name / "copyright",) and src.source.startswith("Debian package")
    assert by["libamdhip64-6"].spdx == "MIT" and by["libhsa-runtime64-1"].spdx == "NCSA"
    assert by["libnuma1"].spdx is None                    # a free-form copyright file: its text, no guess


def test_the_cpu_runtime_carries_llama_cpps_licence_and_each_vendor_librarys(cpu_runtime, llama_tree):
    m = Manifest.load(cpu_runtime)
    assert m.unlicensed() == [] and check_files(cpu_runtime, m) == []
    by = {r.component: r for r in m.licenses}
    llama = by["llama.cpp"]
    assert llama.spdx == "MIT" and set(llama.covers) == {f.path for f in m.files if f.role == "own"}
    assert (cpu_runtime / "licenses/llama.cpp/LICENSE").read_bytes() == (llama_tree / "LICENSE").read_bytes()
    notices = sorted(p.name for p in (llama_tree / "licenses").iterdir())      # json.hpp's MIT notice, ...
    assert notices and all(f"licenses/llama.cpp/{n}" in llama.texts for n in notices)
    vendor = [f for f in m.files if f.role == "vendor"]
    assert vendor, "the cpu runtime carries the host's libgomp"
    for f in vendor:
        (rec,) = [r for r in m.licenses if f.path in r.covers]
        assert rec.texts and all((cpu_runtime / t).is_file() for t in rec.texts)
        if Path(f.path).name.startswith("libgomp"):
            assert rec.spdx == GCC_EXCEPTION
            assert "GCC RUNTIME LIBRARY EXCEPTION" in (cpu_runtime / rec.texts[0]).read_text()
