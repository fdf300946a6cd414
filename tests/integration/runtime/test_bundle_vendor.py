"""Bundling real vendor libraries: NVIDIA's CUDA wheels and Debian sid's ROCm (slow tier: the downloads, cached per machine)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from builder.errors import BuildFailed
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import read_elf, section_strings
from builder.runtime.layout import OwnFile, arch_tokens, data_layout_problems, expected_places
from builder.runtime.manifest import sha256_file
from builder.runtime.place import copy_tree, place_bundle
from builder.runtime.policy import data_rules_for
from tests.support.tiers import downloads
from scripts.support.vendorlibs import (
    SID,
    compile_c,
    cuda_libs,
    extract_deb,
    fetch_deb,
    get_or_skip,
    readelf_dynamic,
    rocm_libs,
)
from tests.unit.runtime.test_bundle import DECOY, place, recipe, run  # shared with the quick tier

CUDA_MAIN = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stddef.h>
const char *llama_probe(void);
int cudaRuntimeGetVersion(int *);
int cublasGetProperty(int type, int *value);
static int cb(struct dl_phdr_info *i, size_t s, void *d) {
    if (i->dlpi_name && i->dlpi_name[0]) printf("LOADED %s\n", i->dlpi_name);
    return 0;
}
int main(void) {
    int rt = 0, major = 0;
    cudaRuntimeGetVersion(&rt);
    cublasGetProperty(0, &major);
    size_t (*lt)(void) = (size_t (*)(void)) dlsym(RTLD_DEFAULT, "cublasLtGetVersion");
    printf("cudart=%d cublas=%d cublasLt=%zu probe=%s\n", rt, major, lt ? lt() : (size_t) 0, llama_probe());
    dl_iterate_phdr(cb, 0);
    return 0;
}
"""


CUDA_LLAMA = r"""
#include <stddef.h>
#include <stdio.h>
size_t cublasLtGetVersion(void);
static char buf[64];
const char *llama_probe(void) { snprintf(buf, sizeof buf, "real-llama lt=%zu", cublasLtGetVersion()); return buf; }
"""


# cold: NVIDIA's cuBLAS and CUDA runtime wheels (pip download, unzipped to 583 MB; about 1 min,
# estimated), prefetched in the background; warm 0 s (the cache's .complete marker)
@pytest.fixture(scope="module")
@downloads(warm=cuda_libs)
def cuda():
    return get_or_skip(cuda_libs)


def cuda_decoys(folder: Path) -> Path:
    """A libcublasLt.so.13 that says so when loaded (with the version node libcublas requires), and a libllama."""
    folder.mkdir()
    script = folder / "lt.map"
    script.write_text("libcublasLt.so.13 { global: *; };\n")
    compile_c(DECOY % {"name": "libcublasLt", "body": "unsigned long cublasLtGetVersion(void) { return 42; }"},
              folder / "libcublasLt.so.13", "-shared", "-Wl,-soname,libcublasLt.so.13", f"-Wl,--version-script={script}")
    compile_c(DECOY % {"name": "libllama", "body": 'const char *llama_probe(void) { return "DECOY"; }'},
              folder / "libllama.so.0", "-shared", "-Wl,-soname,libllama.so.0")
    return folder


def cuda_build(tmp_path: Path, libdir: Path, needs: str) -> tuple[Path, Path]:
    build = tmp_path / "build"
    build.mkdir()
    lib = compile_c(CUDA_LLAMA, build / "libllama.so.0.0.1", "-shared", "-Wl,-soname,libllama.so.0",
                    f"-L{libdir}", "-l:libcublasLt.so.13", f"-Wl,--enable-new-dtags,-rpath,{libdir}")
    (build / "libllama.so.0").symlink_to("libllama.so.0.0.1")
    exe = compile_c(CUDA_MAIN, build / "app", f"-L{build}", "-l:libllama.so.0", f"-L{libdir}", *needs.split(),
                    "-ldl", f"-Wl,--enable-new-dtags,-rpath,{build}:{libdir}")
    return exe, lib


def test_cuda_closure_bytes_and_decoys(tmp_path, cuda):
    exe, lib = cuda_build(tmp_path, cuda.libdir, "-l:libcublas.so.13 -l:libcudart.so.13")
    own = [OwnFile(exe, "bin/app", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library", ("libllama.so.0",))]
    start = time.perf_counter()
    plan = plan_bundle(own, search_dirs=[cuda.libdir])
    analysis = time.perf_counter() - start
    assert analysis < 1.0, f"ELF analysis of {plan.total_bytes() >> 20} MiB took {analysis:.2f}s"
    assert {v.soname for v in plan.vendor} == {"libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13"}
    assert not any(v.soname.startswith("libnvblas") for v in plan.vendor), "only what is needed"
    assert all(not o.pins for o in plan.own), "the wheel's libcublas uses DT_RPATH=$ORIGIN: nothing to pin"
    runtime, result = place(plan, tmp_path / "runtime")
    for v in plan.vendor:
        rec = next(f for f in result.files if f.path == v.dest)
        assert rec.role == "vendor" and rec.sha256 == sha256_file(v.real), "vendor bytes must be untouched"
    decoys = cuda_decoys(tmp_path / "decoys")
    proc, loaded = run(runtime / "bin" / "app", str(decoys))
    assert proc.returncode == 0, proc.stderr
    assert "DECOY" not in proc.stdout and "real-llama" in proc.stdout
    for name in ("libllama.so.0", "libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13"):
        assert loaded[name].startswith(str(runtime.resolve())), (name, loaded[name])
    # control: the same program from the build tree (DT_RUNPATH) takes the decoy libllama
    proc, loaded = run(exe, str(decoys))
    assert "DECOY libllama loaded" in proc.stdout


def test_runpath_vendor_dependency_is_pinned(tmp_path, cuda):
    """NVIDIA's toolkit libcublas finds libcublasLt through DT_RUNPATH=$ORIGIN, which LD_LIBRARY_PATH beats.

    The wheel's copy uses DT_RPATH; a copy converted to DT_RUNPATH (patchelf's default)
    reproduces the toolkit's layout with NVIDIA's real bytes.
    """
    vendor = tmp_path / "toolkit-lib"
    vendor.mkdir()
    shutil.copy2(cuda.libdir / "libcublas.so.13", vendor)
    subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", str(vendor / "libcublas.so.13")], check=True)
    assert readelf_dynamic(vendor / "libcublas.so.13").get("RUNPATH") == ["$ORIGIN"]
    for name in ("libcublasLt.so.13", "libcudart.so.13"):
        (vendor / name).symlink_to(cuda.libdir / name)
    build = tmp_path / "build"
    build.mkdir()
    lib = compile_c('const char *llama_probe(void) { return "real-llama"; }\n', build / "libllama.so.0.0.1",
                    "-shared", "-Wl,-soname,libllama.so.0")
    (build / "libllama.so.0").symlink_to("libllama.so.0.0.1")
    exe = compile_c(CUDA_MAIN, build / "app", f"-L{build}", "-l:libllama.so.0", f"-L{vendor}", "-l:libcublas.so.13",
                    "-l:libcudart.so.13", "-ldl", f"-Wl,-rpath,{build}:{vendor}")
    assert "libcublasLt.so.13" not in readelf_dynamic(exe)["NEEDED"]
    own = [OwnFile(exe, "bin/app", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library", ("libllama.so.0",))]
    plan = plan_bundle(own, search_dirs=[vendor])
    app = next(o for o in plan.own if o.dest == "bin/app")
    assert [s for s, _ in app.pins] == ["libcublasLt.so.13"]
    assert "RUNPATH" in dict(app.pins)["libcublasLt.so.13"]
    decoys = cuda_decoys(tmp_path / "decoys")

    runtime, _ = place(plan, tmp_path / "pinned")
    assert readelf_dynamic(runtime / "bin" / "app")["NEEDED"][0] == "libcublasLt.so.13"
    assert readelf_dynamic(runtime / "lib" / "libcublas.so.13").get("RUNPATH") == ["$ORIGIN"], "vendor file unpatched"
    proc, loaded = run(runtime / "bin" / "app", str(decoys))
    assert proc.returncode == 0, proc.stderr
    assert "DECOY" not in proc.stdout and loaded["libcublasLt.so.13"].startswith(str(runtime.resolve()))

    # without the pin, the bundle's own libcublas loads the decoy
    unpinned = replace(plan, own=tuple(replace(o, pins=()) for o in plan.own))
    runtime2, _ = place(unpinned, tmp_path / "unpinned")
    proc, loaded = run(runtime2 / "bin" / "app", str(decoys))
    assert "DECOY libcublasLt loaded" in proc.stdout


# cold: Debian sid's 19 ROCm .debs (600 MB: rocBLAS 280 MB, hipBLASLt 159 MB), extracted to 1.6 GB with
# rocBLAS data for two archs (2-4 min, estimated), prefetched in the background; warm 0 s
@pytest.fixture(scope="module")
@downloads(warm=rocm_libs)
def rocm():
    return get_or_skip(rocm_libs)


@pytest.fixture(scope="module")
def rocm_bundle(rocm, tmp_path_factory):
    """A HIP-backend-like module and a probe, patched to need what ggml-hip links, bundled for gfx1100."""
    tmp = tmp_path_factory.mktemp("rocm")
    module = compile_c("int ggml_backend_hip_probe(void) { return 1; }\n", tmp / "libggml-hip.so", "-shared")
    probe = compile_c("int main(void) { return 0; }\n", tmp / "rocm-probe")
    needs = ["libhipblas.so.2", "librocblas.so.4", "libamdhip64.so.6", "libhipblaslt.so.1"]
    subprocess.run(["patchelf", *[a for n in needs for a in ("--add-needed", n)], str(module)], check=True)
    subprocess.run(["patchelf", "--add-needed", "libamdhip64.so.6", str(probe)], check=True)
    own = [OwnFile(probe, "bin/rocm-probe", "executable"), OwnFile(module, "bin/libggml-hip.so", "module")]
    plan = plan_bundle(own, search_dirs=[rocm.libdir], recipe=recipe(tmp))
    runtime = tmp / "runtime"
    runtime.mkdir()
    result = place_bundle(plan, runtime)
    return plan, result, runtime


def test_rocm_closure_is_complete_and_clean(rocm, rocm_bundle):
    plan, result, runtime = rocm_bundle
    bundled = {v.soname for v in plan.vendor}
    # what the HIP backend links, what those link, and what HIP dlopens (comgr)
    assert {"librocblas.so.4", "libhipblas.so.2", "libhipblaslt.so.1", "libamdhip64.so.6",
            "libhsa-runtime64.so.1", "libamd_comgr.so.3", "libnuma.so.1", "libelf.so.1"} <= bundled
    comgr = next(v for v in plan.vendor if v.soname == "libamd_comgr.so.3")
    assert comgr.needed_by == ("libamdhip64.so.6",) and "dlopen" in comgr.reason
    system = {s.soname: s for s in plan.system}
    assert system["libdrm.so.2"].decision == "never" and "libhsa-runtime64.so.1" in system["libdrm.so.2"].needed_by
    lib = runtime / "lib"
    for name in ("libdrm.so.2", "libdrm_amdgpu.so.1", "libstdc++.so.6", "libc.so.6", "libgcc_s.so.1"):
        assert name in system and not (lib / name).exists()
    # closed: every NEEDED of every bundled ELF file is in lib/ or left to the host on purpose
    for f in result.files:
        info = read_elf(runtime / f.path) if f.role != "data" else None
        for needed in (info.needed if info else ()):
            assert (lib / needed).exists() or needed in system, f"{f.path} needs {needed}"
    # glibc/GLIBCXX floor: the highest version any bundled file needs, per binutils
    versions = set()
    for f in result.files:
        if f.role != "data":
            out = subprocess.run(["readelf", "-VW", str(runtime / f.path)], capture_output=True, text=True).stdout
            versions |= set(re.findall(r"Name: GLIBC_([0-9.]+)\s+Flags", out))
    assert result.glibc_min == max(versions, key=lambda v: tuple(map(int, v.split("."))))


def test_rocm_symlinks_bytes_and_rpaths(rocm, rocm_bundle):
    plan, result, runtime = rocm_bundle
    records = {f.path: f for f in result.files}
    chains = 0
    for v in plan.vendor:
        real = Path(os.path.realpath(v.source))
        assert records[v.dest].sha256 == sha256_file(real) and records[v.dest].origin == str(real)
        if v.source.is_symlink():                   # the chain as Debian ships it, relative
            link = runtime / "lib" / v.source.name
            assert link.is_symlink() and os.readlink(link) == os.readlink(v.source)
            assert not os.path.isabs(os.readlink(link)) and (runtime / "lib" / os.readlink(link)).is_file()
            chains += 1
    assert chains >= 10
    for own in ("bin/rocm-probe", "bin/libggml-hip.so"):
        facts = readelf_dynamic(runtime / own)
        assert facts["RPATH"] == ["$ORIGIN/../lib"] and "RUNPATH" not in facts
    # every vendor library whose lookups LD_LIBRARY_PATH could hijack (DT_RUNPATH) has its
    # bundled dependencies pinned on each own file that reaches it
    by_soname = {v.soname: v for v in plan.vendor}
    module = next(o for o in plan.own if o.dest == "bin/libggml-hip.so")
    module_needed = readelf_dynamic(runtime / module.dest)["NEEDED"]
    for v in plan.vendor:
        runpath = readelf_dynamic(v.real).get("RUNPATH")
        if not runpath:
            continue
        for dep in read_elf(v.real).needed:
            if dep in by_soname:
                assert dep in module_needed, f"{dep} reached through {v.soname}'s RUNPATH is not pinned"
    assert dict(module.pins), "libLLVM (via comgr) has RUNPATH=$ORIGIN/../lib: its deps must be pinned"


def test_rocm_data_folders_at_the_depth_the_library_reads(rocm, rocm_bundle):
    plan, result, runtime = rocm_bundle
    lib = runtime / "lib"
    rocblas = next(v for v in plan.vendor if v.soname == "librocblas.so.4")
    # Debian patched the folder rocBLAS reads; read it from the library itself
    versioned = section_strings(rocblas.real, rb"rocblas/[0-9][0-9.]*/library")
    assert versioned, "Debian's rocBLAS names its versioned data folder"
    src = rocblas.source.parent / versioned[0]
    dst = lib / versioned[0]
    assert (dst / "TensileLibrary_lazy_gfx1100.dat").is_file()
    src_files = {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()}
    dst_files = {str(p.relative_to(dst)) for p in dst.rglob("*") if p.is_file()}
    kept = {f for f in src_files if not arch_tokens(f) or "gfx1100" in arch_tokens(f)}
    assert dst_files == kept, "structure kept, pruned to the recipe's arch"
    fallback = {f for f in src_files if f.endswith("_fallback.dat")}
    assert fallback and fallback <= dst_files, "arch-less fallback files survive pruning"
    assert any("gfx1010" in f for f in src_files) and not any("gfx1010" in f for f in dst_files)
    for f in dst_files:
        assert sha256_file(dst / f) == sha256_file(src / f)
    assert all(r.role == "data" for r in result.files if r.path.startswith(f"lib/{versioned[0]}/"))
    assert result.size_by_role["data"] == sum((dst / f).stat().st_size for f in dst_files) + \
        sum(r.size for r in result.files if r.role == "data" and r.path.startswith("lib/hipblaslt/"))
    # hipBLASLt: unversioned, beside its library
    hipblaslt = lib / "hipblaslt" / "library"
    assert (hipblaslt / "hipblasltExtOpLibrary.dat").is_file() and any(hipblaslt.glob("*gfx1100*"))
    assert data_layout_problems(runtime) == []


def test_rocm_missing_arch_stops_the_bundle(rocm, tmp_path):
    probe = compile_c("int main(void) { return 0; }\n", tmp_path / "probe")
    subprocess.run(["patchelf", "--add-needed", "librocblas.so.4", str(probe)], check=True)
    with pytest.raises(BuildFailed) as err:      # Debian's rocBLAS has no gfx1151 kernels
        plan_bundle([OwnFile(probe, "bin/probe", "executable")], search_dirs=[rocm.libdir],
                    recipe=recipe(tmp_path, targets='["gfx1151"]'))
    assert "gfx1151" in err.value.line()


def test_flattened_copy_is_caught_if_planted(rocm, rocm_bundle, tmp_path):
    """What `cp -r SRC DST` does when DST is missing (flatten) or present (nest), planted beside a real rocBLAS."""
    plan, _result, runtime = rocm_bundle
    rocblas = next(v for v in plan.vendor if v.soname == "librocblas.so.4")
    place_rel = expected_places(rocblas.real, data_rules_for("librocblas.so.4")[0])[0]   # rocblas/4.4.1/library
    # a small source folder (the arch-less files) laid out as the package lays it out
    src = tmp_path / "src" / place_rel
    copy_tree(rocblas.source.parent / place_rel, src,
              [p.name for p in (rocblas.source.parent / place_rel).glob("*_fallback.dat")])

    def mini(name: str) -> Path:
        rt = tmp_path / name
        (rt / "lib").mkdir(parents=True)
        try:
            os.link(runtime / rocblas.dest, rt / rocblas.dest)
        except OSError:
            shutil.copy2(runtime / rocblas.dest, rt / rocblas.dest)
        return rt

    flat = mini("flat")
    (flat / "lib" / Path(place_rel).parts[0]).mkdir()             # lib/rocblas exists, lib/rocblas/4.4.1 not
    subprocess.run(["cp", "-r", str(src), str(flat / "lib" / Path(place_rel).parent)], check=True)
    problems = data_layout_problems(flat)
    assert any("flattened" in p for p in problems), problems

    nested = mini("nested")
    copy_tree(src, nested / "lib" / place_rel)
    subprocess.run(["cp", "-r", str(src), str(nested / "lib" / place_rel)], check=True)   # DST exists: nests
    assert any("nested" in p for p in data_layout_problems(nested))

    stray = mini("stray")
    copy_tree(src, stray / "lib" / place_rel)
    subprocess.run(["cp", "-r", str(src), str(stray / "lib")], check=True)                # lib/library wins the probe
    assert any("stray" in p and "lib/library" in p for p in data_layout_problems(stray))

    good = mini("good")
    copy_tree(src, good / "lib" / place_rel)
    assert data_layout_problems(good) == []


def test_deb_extraction_without_dpkg(tmp_path):
    """CI hosts without dpkg-deb: the Python ar+xz path extracts the same files."""
    deb = get_or_skip(lambda: fetch_deb(SID["libnuma1"]))
    a = extract_deb(deb, tmp_path / "a", lambda p: True, use_dpkg=False)
    assert a and (tmp_path / "a" / "usr/lib/x86_64-linux-gnu/libnuma.so.1").is_symlink()
    if shutil.which("dpkg-deb"):
        b = extract_deb(deb, tmp_path / "b", lambda p: True, use_dpkg=True)
        files_a = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*"))
        files_b = sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*"))
        assert a == b and files_a == files_b
