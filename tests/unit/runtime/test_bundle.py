"""builder.bundle and builder.policy with real libraries.

- policy: the shipped table and recipe overrides;
- host-only: a program + own library + the host's libgomp, bundled, moved, run, with a
  decoy libllama on LD_LIBRARY_PATH;
- CUDA (NVIDIA's PyPI wheels): closure, untouched bytes, decoy cuBLASLt, RUNPATH pins;
- ROCm (Debian sid): closure, symlink chains, data folders at the depth the library reads,
  arch pruning, the `cp -r` flattening trap planted and caught.
Downloads go through tests/vendorlibs.py (cached per machine).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from builder.runtime.bundle import BundlePlan, plan_bundle
from builder.runtime.layout import OwnFile, arch_tokens, data_layout_problems, expected_places
from builder.runtime.manifest import LinkEntry
from builder.runtime.place import copy_tree, place_bundle
from builder.runtime.elf import read_elf, section_strings
from builder.errors import AssembleError, BuildFailed
from builder.runtime.manifest import sha256_file
from builder.runtime.policy import classify, data_rules_for, load_policy
from builder.config.recipe import parse_recipe

from scripts.support.vendorlibs import (SID, compile_c, cuda_libs, extract_deb, fetch_deb, get_or_skip, loaded_probe, readelf_dynamic,
                        rocm_libs)

LLAMA_OMP = r"""
#include <omp.h>
#include <stdio.h>
static char buf[64];
const char *llama_probe(void) { snprintf(buf, sizeof buf, "real-llama threads=%d", omp_get_max_threads()); return buf; }
"""

DECOY = r"""
#include <stdio.h>
__attribute__((constructor)) static void decoy(void) { fputs("DECOY %(name)s loaded\n", stdout); fflush(stdout); }
%(body)s
"""


def run(exe: Path, ld_library_path: str | None = None) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run with an environment of our choosing only (no inherited LD_* variables)."""
    env = {"PATH": "/usr/bin:/bin"}
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env=env)
    loaded = {Path(p).name: os.path.realpath(p) for p in re.findall(r"^LOADED (.+)$", proc.stdout, re.M)}
    return proc, loaded


def recipe(tmp_path: Path, extra: str = "", targets: str = '["gfx1100"]'):
    text = f'''name = "t"
description = "test recipe"
backends = ["hip"]
[pin]
sha = "{'0' * 40}"
[[pin.mirrors]]
kind = "local"
path = "/nowhere"
[hip]
targets = {targets}
{extra}
'''
    return parse_recipe(tmp_path / "t.toml", text)


def _moved_with_decoy(runtime: Path, tmp_path: Path, soname: str, body: str) -> tuple[Path, Path]:
    """The runtime moved to another path, and a folder holding a decoy `soname` for LD_LIBRARY_PATH."""
    moved = tmp_path / "elsewhere" / "rt"
    moved.parent.mkdir()
    shutil.move(runtime, moved)
    decoys = tmp_path / "decoys"
    decoys.mkdir()
    compile_c(DECOY % {"name": soname.split(".so")[0], "body": body}, decoys / soname, "-shared",
              f"-Wl,-soname,{soname}")
    return moved, decoys


def place(plan: BundlePlan, where: Path) -> tuple[Path, object]:
    where.mkdir(parents=True)
    return where, place_bundle(plan, where)


# --- policy ------------------------------------------------------------------

@pytest.mark.parametrize("soname,decision", [
    ("libc.so.6", "never"), ("ld-linux-x86-64.so.2", "never"), ("libpthread.so.0", "never"),
    ("libstdc++.so.6", "never"), ("libgcc_s.so.1", "never"), ("libcuda.so.1", "never"),
    ("libnvidia-ml.so.1", "never"), ("libvulkan.so.1", "never"), ("libGLX.so.0", "never"),
    ("libEGL.so.1", "never"), ("libdrm_amdgpu.so.1", "never"),
    ("libssl.so.3", "system"), ("libcrypto.so.3", "system"),
    ("libcudart.so.13", "bundle"), ("libcublasLt.so.13", "bundle"), ("libnccl.so.2", "bundle"),
    ("libamdhip64.so.6", "bundle"), ("librocblas.so.4", "bundle"), ("libhipblaslt.so.1", "bundle"),
    ("libgomp.so.1", "bundle"), ("libnuma.so.1", "bundle"), ("libsomething-new.so.9", "bundle"),
])
def test_policy_decisions(soname, decision):
    got, reason = classify(soname)
    assert got == decision and reason.strip()


def test_every_policy_entry_has_a_reason_and_ships_in_the_package():
    import builder
    from builder.runtime.policy import POLICY_FILE
    policy = load_policy()
    assert POLICY_FILE.is_file() and Path(builder.__file__).resolve().parent in POLICY_FILE.parents
    assert all(r.reason.strip() for r in policy.rules)
    assert all(c.reason.strip() for c in policy.companions) and all(d.reason.strip() for d in policy.data)


def test_recipe_overrides(tmp_path):
    r = recipe(tmp_path, '[bundle.always]\n"libstdc++.so.6" = "this host has an old GCC runtime"\n'
                         '[bundle.never]\n"libgomp.so.1" = "the target image ships its own"\n')
    assert classify("libstdc++.so.6", r) == ("bundle", "recipe t: this host has an old GCC runtime")
    assert classify("libgomp.so.1", r)[0] == "never"
    locked = recipe(tmp_path, '[bundle.always]\n"libc.so*" = "please"\n')
    with pytest.raises(AssembleError) as err:
        classify("libc.so.6", locked)
    assert "bundle.always" in err.value.line()


# --- host-only bundling (no downloads) ---------------------------------------

@pytest.fixture
def omp_build(tmp_path):
    """A build tree: bin/probe -> libllama.so.0 (own, OpenMP) -> the host's libgomp.so.1."""
    build = tmp_path / "build"
    build.mkdir()
    lib = compile_c(LLAMA_OMP, build / "libllama.so.0.0.1", "-shared", "-fopenmp", "-Wl,-soname,libllama.so.0")
    (build / "libllama.so.0").symlink_to("libllama.so.0.0.1")
    exe = compile_c(loaded_probe("llama_probe"), build / "probe", f"-L{build}", "-l:libllama.so.0",
                    f"-Wl,--enable-new-dtags,-rpath,{build}")
    return build, exe, lib


def test_host_closure_placement_and_relocation(tmp_path, omp_build):
    _build, exe, lib = omp_build
    own = [OwnFile(exe, "bin/probe", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library")]
    plan = plan_bundle(own)
    vendor = {v.soname: v for v in plan.vendor}
    assert set(vendor) == {"libgomp.so.1"}
    gomp = vendor["libgomp.so.1"]
    assert gomp.needed_by == ("lib/libllama.so.0.0.1",)
    libllama = next(o for o in plan.own if o.dest.startswith("lib/"))
    assert libllama.links == ("libllama.so.0",), "the SONAME link is added when the caller forgot it"
    assert {s.soname for s in plan.system} >= {"libc.so.6"}
    runtime, result = place(plan, tmp_path / "runtime")

    # own files: DT_RPATH relative to themselves, never RUNPATH
    for path, rpath in (("bin/probe", "$ORIGIN/../lib"), ("lib/libllama.so.0.0.1", "$ORIGIN")):
        facts = readelf_dynamic(runtime / path)
        assert facts.get("RPATH") == [rpath] and "RUNPATH" not in facts
    # vendor bytes untouched, symlink chain as at the source, manifest facts true
    real = Path(os.path.realpath(gomp.source))
    assert sha256_file(runtime / "lib" / real.name) == sha256_file(real)
    assert os.readlink(runtime / "lib" / "libgomp.so.1") == os.readlink(gomp.source)
    records = {f.path: f for f in result.files}
    for f in result.files:
        assert sha256_file(runtime / f.path) == f.sha256 and (runtime / f.path).stat().st_size == f.size
    assert records["lib/" + real.name].role == "vendor" and records["lib/" + real.name].origin == str(real)
    assert records["bin/probe"].role == "own" and records["bin/probe"].mode & 0o111
    assert result.size_by_role["vendor"] == real.stat().st_size
    assert result.size_by_role["own"] == sum(f.size for f in result.files if f.role == "own")
    assert LinkEntry("lib/libllama.so.0", "libllama.so.0.0.1") in result.symlinks
    assert result.glibc_min and result.glibc_min == plan.glibc_min

    # relocatable: moved elsewhere and run with a decoy libllama.so.0 on LD_LIBRARY_PATH
    moved, decoys = _moved_with_decoy(runtime, tmp_path, "libllama.so.0", 'const char *llama_probe(void) '
                                      '{ return "DECOY"; }')
    proc, loaded = run(moved / "bin" / "probe", str(decoys))
    assert proc.returncode == 0, proc.stderr
    assert "DECOY" not in proc.stdout and "real-llama" in proc.stdout
    assert loaded["libllama.so.0"].startswith(str(moved.resolve()))
    assert loaded["libgomp.so.1"].startswith(str(moved.resolve()))
    # the decoy is real: the build tree's RUNPATH binary does load it
    proc, loaded = run(exe, str(decoys))
    assert "DECOY libllama loaded" in proc.stdout


LOADER = r"""
#include <dlfcn.h>
#include <stdio.h>
/* what libggml does: dlopen() a module by full path and call into it */
const char *load_module(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fputs(dlerror(), stderr); return "NOT LOADED"; }
    const char *(*f)(void) = (const char *(*)(void))dlsym(h, "module_probe");
    return f ? f() : "NO SYMBOL";
}
"""
MODULE = r"""
const char *dep_probe(void);
const char *module_probe(void) { return dep_probe(); }
"""
HOST = r"""
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
const char *load_module(const char *path);
int main(void) {
    char exe[PATH_MAX] = {0}, mod[PATH_MAX + 32];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) return 2;
    snprintf(mod, sizeof mod, "%s/libggml-cpu.so", dirname(exe));
    puts(load_module(mod));
    return 0;
}
"""


def test_module_without_rpath_is_left_as_is_and_still_loads_from_lib(tmp_path):
    """A backend module with neither DT_RPATH nor DT_RUNPATH is copied byte for byte: glibc searches its
    dependencies in its loader chain's DT_RPATH (libggml's $ORIGIN), before LD_LIBRARY_PATH. The same
    module with a RUNPATH is patched. verify's static model agrees with the bundler on both."""
    from builder.check.report import FAIL, PASS
    from builder.check.static import run as static_checks
    build = tmp_path / "build"
    build.mkdir()
    compile_c('const char *dep_probe(void) { return "real-dep"; }', build / "libdep.so.1", "-shared",
              "-Wl,-soname,libdep.so.1")
    compile_c(LOADER, build / "libggml.so.0", "-shared", "-Wl,-soname,libggml.so.0", "-ldl")
    bare = compile_c(MODULE, build / "libggml-cpu.so", "-shared", f"-L{build}", "-l:libdep.so.1")
    exe = compile_c(HOST, build / "probe", f"-L{build}", "-l:libggml.so.0")
    assert read_elf(bare).rpath == () and read_elf(bare).runpath == ()
    own = [OwnFile(exe, "bin/probe", "executable"), OwnFile(build / "libggml.so.0", "lib/libggml.so.0", "library"),
           OwnFile(build / "libdep.so.1", "lib/libdep.so.1", "library"),
           OwnFile(bare, "bin/libggml-cpu.so", "module")]
    plan = plan_bundle(own)
    rpaths = {o.dest: o.rpath for o in plan.own}
    assert rpaths["bin/libggml-cpu.so"] is None and rpaths["lib/libggml.so.0"] == "$ORIGIN"
    runtime, _ = place(plan, tmp_path / "runtime")
    assert sha256_file(runtime / "bin/libggml-cpu.so") == sha256_file(bare), "the module must stay byte for byte"

    moved, decoys = _moved_with_decoy(runtime, tmp_path, "libdep.so.1", 'const char *dep_probe(void) { return "DECOY"; }')
    proc, _ = run(moved / "bin" / "probe", str(decoys))
    assert proc.returncode == 0 and proc.stdout.strip() == "real-dep", (proc.stdout, proc.stderr)
    checks = {c.name: c for c in static_checks(moved, None, ())}
    for name in ("libraries resolve", "RPATH of own files", "LD_LIBRARY_PATH lookups"):
        assert checks[name].status == PASS, checks[name]
    assert "1 backend modules without one use their loader's: lib/libggml.so.0" in checks["RPATH of own files"].reason

    # the rule needs the loader's DT_RPATH: a module with a RUNPATH (not inherited) is patched...
    (build / "ran").mkdir()
    ran = compile_c(MODULE, build / "ran" / "libggml-cpu.so", "-shared", f"-L{build}", "-l:libdep.so.1",
                    "-Wl,--enable-new-dtags,-rpath,/somewhere")
    plan = plan_bundle([*own[:3], OwnFile(ran, "bin/libggml-cpu.so", "module")])
    assert next(o.rpath for o in plan.own if o.kind == "module") == "$ORIGIN/../lib"
    # ...and verify fails a bare module when no libggml with a DT_RPATH naming lib/ loads it
    (moved / "lib" / "libggml.so.0").unlink()
    checks = {c.name: c for c in static_checks(moved, None, ())}
    assert checks["RPATH of own files"].status == FAIL
    assert "bin/libggml-cpu.so has no DT_RPATH" in checks["RPATH of own files"].reason


def test_unresolved_names_library_and_requester(tmp_path, omp_build):
    _build, exe, lib = omp_build
    subprocess.run(["patchelf", "--add-needed", "libnot-installed.so.7", str(exe)], check=True)
    with pytest.raises(BuildFailed) as err:
        plan_bundle([OwnFile(exe, "bin/probe", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library")])
    line = err.value.line()
    assert "libnot-installed.so.7" in line and "bin/probe" in line and err.value.code == 1


def test_stub_is_never_a_resolution(tmp_path, omp_build):
    _build, exe, lib = omp_build
    subprocess.run(["patchelf", "--add-needed", "libfakedriver.so.1", str(exe)], check=True)
    stubs = tmp_path / "toolkit" / "stubs"
    stubs.mkdir(parents=True)
    compile_c("int x(void){return 0;}\n", stubs / "libfakedriver.so.1", "-shared", "-Wl,-soname,libfakedriver.so.1")
    with pytest.raises(BuildFailed) as err:
        plan_bundle([OwnFile(exe, "bin/probe", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library")],
                    search_dirs=[stubs])
    assert "stub" in err.value.line() and "libfakedriver.so.1" in err.value.line()


def test_bad_inputs(tmp_path, omp_build):
    _build, exe, lib = omp_build
    with pytest.raises(AssembleError):
        plan_bundle([OwnFile(exe, "../bin/probe", "executable")])
    with pytest.raises(AssembleError):
        plan_bundle([OwnFile(exe, "bin/probe", "tool")])
    plan = plan_bundle([OwnFile(exe, "bin/probe", "executable"), OwnFile(lib, "lib/libllama.so.0.0.1", "library")])
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("")
    with pytest.raises(AssembleError) as err:
        place_bundle(plan, busy)
    assert "not empty" in err.value.line()


def test_patchelf_version_gate():
    from builder.runtime.place import MIN_PATCHELF, patchelf_tool
    from builder.toolchain.detect import find_tool, version_tuple
    tool = find_tool("patchelf")
    assert version_tuple(tool.version) >= MIN_PATCHELF and patchelf_tool() == tool.path
    assert version_tuple("0.18.0") < MIN_PATCHELF and version_tuple("0.17.2") < MIN_PATCHELF


def test_copy_tree_keeps_structure_where_cp_r_would_not(tmp_path):
    src = tmp_path / "src" / "rocblas" / "4.4.1" / "library"
    (src / "gfx1100").mkdir(parents=True)
    (src / "TensileLibrary_lazy_gfx1100.dat").write_text("x")
    (src / "gfx1100" / "kernels.co").write_text("y")
    dst = tmp_path / "rt" / "lib" / "rocblas" / "4.4.1" / "library"   # parents missing: cp -r would flatten
    copied = copy_tree(src, dst)
    assert sorted(r for r, _, _ in copied) == ["TensileLibrary_lazy_gfx1100.dat", "gfx1100/kernels.co"]
    assert (dst / "gfx1100" / "kernels.co").read_text() == "y"
    with pytest.raises(AssembleError):                                 # cp -r would nest library/library
        copy_tree(src, dst)
    # what cp -r does with the same arguments, for contrast
    flat = tmp_path / "cp" / "lib" / "rocblas" / "4.4.1"
    flat.parent.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(src), str(flat)], check=True)
    assert (flat / "TensileLibrary_lazy_gfx1100.dat").is_file() and not (flat / "library").exists()


def test_arch_tokens():
    assert arch_tokens("TensileLibrary_Type_HH_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat") == set()
    assert arch_tokens("Kernels.so-000-gfx1100.hsaco") == {"gfx1100"}
    assert arch_tokens("gfx90a/TensileLibrary_gfx90a.co") == {"gfx90a"}
    assert arch_tokens("extop_gfx9-4-generic.co") == set()


# --- CUDA: NVIDIA's wheels -----------------------------------------------------

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


@pytest.fixture(scope="module")
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


# --- ROCm: Debian sid ----------------------------------------------------------

@pytest.fixture(scope="module")
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


@pytest.mark.slow   # downloads vendor libraries
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
