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
from pathlib import Path

import pytest

from builder.runtime.bundle import BundlePlan, plan_bundle
from builder.runtime.layout import OwnFile, arch_tokens
from builder.runtime.manifest import LinkEntry
from builder.runtime.place import copy_tree, place_bundle
from builder.runtime.elf import read_elf
from builder.errors import AssembleError, BuildFailed
from builder.runtime.manifest import sha256_file
from builder.runtime.policy import classify, load_policy
from builder.config.recipe import parse_recipe

from scripts.support.vendorlibs import (compile_c, loaded_probe, readelf_dynamic)

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


# --- ROCm: Debian sid ----------------------------------------------------------


