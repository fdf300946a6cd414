"""assemble verify: each failure mode planted in a copy of a good runtime, and named precisely.

The cpu runtime comes from the session fixture (a real build); the ROCm cases add Debian
sid's real rocBLAS/hipBLASLt, placed by the bundler, to a copy of it. Every plant is
checked twice where it matters: the raw plant trips the manifest hash check, and with
the manifest regenerated around it (reseal) the specific check still names it.
"""

from __future__ import annotations

import ctypes.util
import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.check import dynamic as devices
from builder.check import static as staticcheck
from builder.check.verify import FAIL, PASS, SKIP, WARN, Report, verify_runtime
from builder.config.recipe import parse_recipe
from builder.runtime import manifest
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import read_elf, section_strings
from builder.runtime.layout import OwnFile, arch_tokens
from builder.runtime.manifest import Manifest
from builder.runtime.place import place_bundle
from tests.support.common import assemble
from tests.support.manifests import copy_runtime, read_raw, refresh_facts, reseal, write_raw
from tests.support.planted import build_planted_module
from scripts.support.vendorlibs import compile_c, cuda_libs, get_or_skip, rocm_libs



# --- helpers -------------------------------------------------------------------

def checks_of(report_or_list) -> dict[str, object]:
    checks = report_or_list.checks if isinstance(report_or_list, Report) else report_or_list
    return {c.name: c for c in checks}


def static(runtime: Path) -> dict[str, object]:
    m = Manifest.load(runtime)
    return checks_of(staticcheck.run(runtime, m, m.recipe.backends))


def assert_only_failures(report: Report, *names: str) -> None:
    failed = {c.name for c in report.checks if c.status == FAIL}
    assert failed == set(names), [(c.name, c.reason) for c in report.checks if c.status == FAIL]


@pytest.fixture
def good(cpu_runtime, tmp_path) -> Path:
    return copy_runtime(cpu_runtime, tmp_path / "runtime-cpu")


# --- a good runtime --------------------------------------------------------------

def test_good_cpu_runtime_passes_every_check(good):
    report = verify_runtime(good)
    checks = checks_of(report)
    assert report.passed, [(c.name, c.reason) for c in report.checks if c.status != PASS]
    for name in ("manifest hashes", "file modes", "symlinks", "unlisted modules", "libraries resolve",
                 "RPATH of own files", "LD_LIBRARY_PATH lookups", "never-bundled libraries", "module cpu",
                 "--list-devices", "working-directory modules", "LD_LIBRARY_PATH decoys"):
        assert checks[name].status == PASS, (name, checks[name].reason)
    assert "constructor never ran" in checks["working-directory modules"].reason


def test_the_planted_module_is_one_ggml_would_load(good, tmp_path):
    """The working-directory check means something only if the plant is loadable: put it where
    ggml does look (next to the executable) and its constructor runs."""
    marker = tmp_path / "marker"
    build_planted_module(good / "bin", marker)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    subprocess.run([str(good / "bin" / "llama-server"), "--list-devices"], env={}, cwd=cwd, capture_output=True,
                   timeout=120)
    assert marker.read_text().startswith("planted module loaded")


# --- manifest: tampering and partial copies -----------------------------------------

def test_tampered_file_is_named(good):
    target = good / "lib" / os.readlink(good / "lib" / "libllama.so.0")
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    check = checks_of(verify_runtime(good))["manifest hashes"]
    assert check.status == FAIL
    assert f"lib/{target.name}: content differs from the manifest (sha256)" in check.reason


def test_partial_copy_and_extra_file_are_named(good):
    (good / "lib" / os.readlink(good / "lib" / "libmtmd.so.0")).unlink()
    (good / "bin" / "notes.txt").write_text("added after the build\n")
    reason = checks_of(verify_runtime(good))["manifest hashes"].reason
    assert "libmtmd.so" in reason and ": missing" in reason
    assert "bin/notes.txt: not in the manifest" in reason


def test_truncated_copy_is_named_even_without_the_manifest(good):
    """An interrupted copy keeps the ELF header: the hash check sees it, and so does the ELF check on its own."""
    target = good / "lib" / os.readlink(good / "lib" / "libggml.so.0")
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    report = verify_runtime(good)
    assert f"lib/{target.name}: content differs" in checks_of(report)["manifest hashes"].reason
    (good / manifest.NAME).unlink()
    closure = checks_of(staticcheck.run(good, None, ("cpu",)))["libraries resolve"]
    assert closure.status == FAIL and f"lib/{target.name}: truncated" in closure.reason


# --- ELF closure -----------------------------------------------------------------

def test_missing_library(good):
    real = os.readlink(good / "lib" / "libllama-common.so.0")
    (good / "lib" / real).unlink()
    assert checks_of(verify_runtime(good))["manifest hashes"].status == FAIL     # the raw plant
    reseal(good)
    report = verify_runtime(good)
    check = checks_of(report)["libraries resolve"]
    assert check.status == FAIL and "libllama-common.so.0 (needed by " in check.reason and "is not found" in check.reason
    assert checks_of(report)["manifest hashes"].status == PASS
    assert checks_of(report)["--list-devices"].status == FAIL        # and llama-server indeed cannot start


def test_library_from_outside_the_runtime(good):
    """libgomp deleted with its manifest entries: it now comes from the host, which the static walk
    predicts and the smoke run's /proc/<pid>/maps confirms."""
    host = ctypes.util.find_library("gomp")
    if host is None:
        pytest.skip("the host has no libgomp to load instead")
    for p in (good / "lib").glob("libgomp.so*"):
        p.unlink()
    reseal(good)
    report = verify_runtime(good, smoke=True)
    checks = checks_of(report)
    closure = checks["libraries resolve"]
    assert closure.status == FAIL
    assert "libgomp.so.1 (needed by " in closure.reason and "outside the runtime, though the policy carries it" \
        in closure.reason
    smoke = checks["smoke CPU"]
    assert smoke.status == FAIL and "libraries loaded from outside the runtime" in smoke.reason
    assert "libgomp.so.1" in smoke.reason
    assert checks["manifest hashes"].status == PASS


# --- RPATH / RUNPATH -----------------------------------------------------------------

def test_runpath_on_own_file_and_a_decoy_on_ld_library_path(cpu_runtime, good, tmp_path):
    exe = good / "bin" / "llama-server"
    subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", str(exe)], check=True)   # RUNPATH, no --force-rpath
    assert read_elf(exe).runpath == ("$ORIGIN/../lib",)
    raw = checks_of(verify_runtime(good))["manifest hashes"]
    assert raw.status == FAIL and "bin/llama-server: content differs" in raw.reason
    reseal(good, changed=("bin/llama-server",))

    report = verify_runtime(good)
    assert_only_failures(report, "RPATH of own files", "LD_LIBRARY_PATH lookups", "LD_LIBRARY_PATH decoys")
    checks = checks_of(report)
    assert "bin/llama-server has DT_RUNPATH $ORIGIN/../lib" in checks["RPATH of own files"].reason
    first = read_elf(exe).needed[0]                       # what llama-server looks up first, through its RUNPATH
    assert f"{first} (needed by bin/llama-server) is found through its runpath" in \
        checks["LD_LIBRARY_PATH lookups"].reason
    assert f"{first} (needed by bin/llama-server)" in checks["LD_LIBRARY_PATH decoys"].reason

    # why it matters: broken libraries of the runtime's names on LD_LIBRARY_PATH
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    for name in {first, "libllama.so.0", "libggml.so.0", "libggml-base.so.0"}:
        (decoy / name).write_bytes(b"not an ELF file: a decoy\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def list_devices(runtime: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(runtime / "bin" / "llama-server"), "--list-devices"], cwd=cwd, timeout=120,
                              env={"LD_LIBRARY_PATH": str(decoy)}, capture_output=True, text=True)

    hijacked = list_devices(good)
    assert hijacked.returncode != 0 and str(decoy / first) in hijacked.stderr
    untouched = list_devices(cpu_runtime)                 # DT_RPATH: the same decoys are never reached
    assert untouched.returncode == 0 and "Available devices" in untouched.stdout


def test_vendor_runpath_dependency_must_be_pinned(tmp_path):
    """NVIDIA's toolkit libcublas finds libcublasLt through DT_RUNPATH=$ORIGIN, after LD_LIBRARY_PATH.
    The bundler pins libcublasLt as NEEDED of our module, so ld.so loads it first through our
    DT_RPATH; the static walk must see the pin work, and see its absence."""
    cuda = get_or_skip(cuda_libs)
    toolkit = tmp_path / "toolkit-lib"
    toolkit.mkdir()
    shutil.copy2(cuda.libdir / "libcublas.so.13", toolkit)
    subprocess.run(["patchelf", "--set-rpath", "$ORIGIN", str(toolkit / "libcublas.so.13")], check=True)  # RUNPATH
    for name in ("libcublasLt.so.13", "libcudart.so.13"):
        (toolkit / name).symlink_to(cuda.libdir / name)
    module = compile_c("int ggml_backend_cuda_probe(void) { return 1; }\n", tmp_path / "libggml-cuda.so", "-shared")
    subprocess.run(["patchelf", "--add-needed", "libcublas.so.13", "--add-needed", "libcudart.so.13", str(module)],
                   check=True)
    server = compile_c("int main(void) { return 0; }\n", tmp_path / "llama-server")
    plan = plan_bundle([OwnFile(server, "bin/llama-server", "executable"),
                        OwnFile(module, "bin/libggml-cuda.so", "module")], search_dirs=[toolkit])
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    place_bundle(plan, runtime)
    placed = runtime / "bin" / "libggml-cuda.so"
    assert "libcublasLt.so.13" in read_elf(placed).needed
    assert checks_of(staticcheck.run(runtime, None, ("cuda",)))["LD_LIBRARY_PATH lookups"].status == PASS

    subprocess.run(["patchelf", "--remove-needed", "libcublasLt.so.13", str(placed)], check=True)
    check = checks_of(staticcheck.run(runtime, None, ("cuda",)))["LD_LIBRARY_PATH lookups"]
    assert check.status == FAIL
    assert "libcublasLt.so.13 (needed by lib/libcublas.so.13) is found through its runpath" in check.reason


# --- never-bundled ---------------------------------------------------------------------

def test_bundled_libcuda_stub(good, tmp_path):
    """A link-time stub copied in, as a naive closure walk over a CUDA toolkit's lib64/stubs would do."""
    stubs = tmp_path / "cuda" / "lib64" / "stubs"
    stubs.mkdir(parents=True)
    stub = compile_c("int cuInit(unsigned int flags) { return 34; /* CUDA_ERROR_STUB_LIBRARY */ }\n",
                     stubs / "libcuda.so", "-shared", "-Wl,-soname,libcuda.so.1")
    shutil.copy2(stub, good / "lib" / "libcuda.so.1")
    assert "lib/libcuda.so.1: not in the manifest" in checks_of(verify_runtime(good))["manifest hashes"].reason
    reseal(good, origin={"lib/libcuda.so.1": str(stub)})
    report = verify_runtime(good)
    assert_only_failures(report, "never-bundled libraries")
    reason = checks_of(report)["never-bundled libraries"].reason
    assert "lib/libcuda.so.1 (libcuda.so.1) must never be bundled: the NVIDIA driver" in reason
    assert f"lib/libcuda.so.1 was copied from a stubs/ folder ({stub})" in reason


# --- backend modules ----------------------------------------------------------------

def test_missing_backend_module(good):
    modules = devices.module_files(good, "cpu")        # every CPU variant, moved where a tidy-minded packager
    for m in modules:                                   # might put them
        m.rename(good / "lib" / m.name)
    module = modules[0]
    reseal(good)
    report = verify_runtime(good)
    check = checks_of(report)["module cpu"]
    assert check.status == FAIL
    assert "no libggml-cpu*.so in bin/" in check.reason and f"found lib/{module.name}" in check.reason
    assert not any(c.name.startswith("load libggml-cpu") for c in report.checks)


# --- what a stranger breaks: modes, links, planted modules (builder/check/integrity.py) ----------

def cli_fails(runtime: Path, name: str) -> dict:
    """Through the real CLI: exit 1, one report, no traceback; the named check's row."""
    proc = assemble("verify", str(runtime), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    row = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}[name]
    assert row["status"] == "fail"
    return row


def assert_not_run_because_the_server_did_not_start(checks: dict, why: str) -> None:
    for name in ("working-directory modules", "LD_LIBRARY_PATH decoys"):
        assert checks[name].status == SKIP, (name, checks[name].reason)
        assert checks[name].reason.startswith("not run: llama-server did not start (") and why in checks[name].reason


def test_executable_that_lost_its_x_bit(good):
    (good / "bin" / "llama-server").chmod(0o644)
    report = verify_runtime(good)
    assert_only_failures(report, "file modes", "--list-devices")
    checks = checks_of(report)
    assert checks["file modes"].reason == ("bin/llama-server is not executable (mode 0644, built 0755): "
                                          "it cannot be started")
    assert checks["manifest hashes"].status == PASS
    assert_not_run_because_the_server_did_not_start(checks, "cannot execute bin/llama-server")
    assert "bin/llama-server is not executable" in cli_fails(good, "file modes")["reason"]


def test_setuid_library(good):
    lib = good / "lib" / os.readlink(good / "lib" / "libggml.so.0")
    lib.chmod(0o4755)
    report = verify_runtime(good)
    assert_only_failures(report, "file modes")
    assert checks_of(report)["file modes"].reason == (f"lib/{lib.name} has the setuid bit (mode 4755): "
                                                     "a runtime never needs it")


@pytest.mark.parametrize("where", ["lib/libmtmd.so.0", "lib"])
def test_world_writable_file_or_folder(good, where):
    target = good / where
    target = target.parent / os.readlink(target) if target.is_symlink() else target
    target.chmod(target.stat().st_mode & 0o7777 | 0o002)
    report = verify_runtime(good, static=True)
    assert_only_failures(report, "file modes")
    shown = target.relative_to(good).as_posix() + ("/" if target.is_dir() else "")
    assert checks_of(report)["file modes"].reason.startswith(f"{shown} is world-writable (mode 0757)")
    assert f"{shown} is world-writable" in cli_fails(good, "file modes")["reason"]


def test_manifest_json_that_is_a_symlink(good, tmp_path):
    """A link to a perfectly valid manifest: it could vouch for files it does not describe."""
    elsewhere = tmp_path / "elsewhere.json"
    shutil.copy2(good / manifest.NAME, elsewhere)
    (good / manifest.NAME).unlink()
    (good / manifest.NAME).symlink_to(elsewhere)
    assert Manifest.from_json(elsewhere.read_text()).files                       # valid where it points
    checks = checks_of(verify_runtime(good, static=True))
    assert checks["manifest"].status == FAIL and "is a symlink, not the file the build wrote" in checks["manifest"].reason
    assert checks["symlinks"].status == FAIL and f"manifest.json -> {elsewhere}: an absolute target" in \
        checks["symlinks"].reason
    assert "is a symlink" in cli_fails(good, "manifest")["reason"]


@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("target", ["/etc/passwd", "../../../etc"])
def test_symlink_leaving_the_runtime(good, listed, target):
    (good / "lib" / "evil").symlink_to(target)
    if listed:
        reseal(good)                  # the manifest now lists it: the typed reader refuses such a manifest
    checks = checks_of(verify_runtime(good, static=True))
    words = "an absolute target" if target.startswith("/") else "leads outside the runtime"
    assert checks["symlinks"].status == FAIL and checks["symlinks"].reason.startswith(f"lib/evil -> {target}: {words}")
    if listed:
        assert checks["manifest"].status == FAIL and f"lib/evil -> {target!r} leads outside the runtime" in \
            checks["manifest"].reason
    else:
        assert "lib/evil: not in the manifest" in checks["manifest hashes"].reason


def test_manifest_entry_outside_the_runtime(good):
    data = read_raw(good)
    data["files"][0]["path"] = "../x"
    write_raw(good, data)
    report = verify_runtime(good, static=True)
    check = checks_of(report)["manifest"]
    assert check.status == FAIL and "files[0].path '../x' is not a clean path inside the runtime" in check.reason
    assert "'../x' is not a clean path" in cli_fails(good, "manifest")["reason"]


def test_planted_module_of_an_unlisted_backend(good, tmp_path):
    """A libggml-cuda.so dropped into bin/ of a cpu runtime (and the manifest resealed around it):
    ggml's loader loads it into llama-server, as its constructor's marker proves."""
    marker = tmp_path / "cuda-plant-ran"
    plant = build_planted_module(tmp_path, marker)
    shutil.copy2(plant, good / "bin" / "libggml-cuda.so")
    assert "bin/libggml-cuda.so: not in the manifest" in checks_of(verify_runtime(good, static=True))[
        "manifest hashes"].reason
    reseal(good)
    report = verify_runtime(good)
    assert_only_failures(report, "unlisted modules")
    assert checks_of(report)["unlisted modules"].reason.startswith(
        "bin/libggml-cuda.so is a cuda backend module, but the runtime lists cpu")
    assert marker.exists()            # the verify's own llama-server runs loaded it: why the check fails
    assert "libggml-cuda.so" in cli_fails(good, "unlisted modules")["reason"]


def test_listed_backend_whose_module_was_removed(good):
    for module in devices.module_files(good, "cpu"):      # every CPU variant
        module.unlink()
    reseal(good)
    report = verify_runtime(good)
    check = checks_of(report)["module cpu"]
    assert check.status == FAIL and check.reason.startswith("no libggml-cpu*.so in bin/ (ggml's loader looks next to "
                                                           "the executable): its devices would silently vanish")
    assert checks_of(report)["manifest hashes"].status == PASS
    assert cli_fails(good, "module cpu")


def test_a_server_that_cannot_start_proves_nothing(good):
    """The real library behind lib/libllama.so.0 removed: llama-server cannot start. The checks that
    see why fail; those that need a started server say "not run" and why, never PASS."""
    real = good / "lib" / os.readlink(good / "lib" / "libllama.so.0")
    real.unlink()
    report = verify_runtime(good)
    checks = checks_of(report)
    assert_only_failures(report, "manifest hashes", "libraries resolve", "--list-devices")
    assert "libllama.so.0: cannot open shared object file" in checks["--list-devices"].reason
    assert_not_run_because_the_server_did_not_start(checks, "libllama.so.0: cannot open shared object file")
    proc = assemble("verify", str(good))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "working-directory modules  SKIP  not run: llama-server did not start (exit 127:" in proc.stderr


def test_a_server_that_fails_is_never_a_pass(tmp_path):
    """The dynamic checks look at the same run's exit status and device list before reading its trace."""
    runtime = tmp_path / "rt"
    (runtime / "bin").mkdir(parents=True)
    server = runtime / "bin" / "llama-server"
    server.write_text("#!/bin/sh\necho 'ggml: something went wrong' >&2\nexit 3\n")
    server.chmod(0o755)
    planted = devices.planted_module_loaded(runtime, {})
    assert planted.loaded is None and planted.how == "llama-server did not start (exit 3: ggml: something went wrong)"
    assert devices.ld_library_path_searched(runtime, {}).not_run == planted.how
    server.write_text("#!/bin/sh\necho 'Available devices:'\n")        # starts and lists no device: now it counts
    assert devices.ld_library_path_searched(runtime, {}) == devices.Searched(found=(), not_run=None)
    assert devices.planted_module_loaded(runtime, {}).loaded is False


def test_a_runtime_without_its_manifest_still_gets_a_report(good):
    (good / manifest.NAME).unlink()
    row = cli_fails(good, "manifest")
    assert row["reason"].startswith("manifest.json missing")


# --- the command line --------------------------------------------------------------

def test_cli_table_json_and_exit_codes(good, tmp_path):
    ok = assemble("verify", str(good), "--json")
    body = json.loads(ok.stdout)
    assert ok.returncode == 0 and body["passed"] is True
    assert {"name", "status", "reason", "hint"} <= set(body["checks"][0])
    table = assemble("verify", str(good))
    assert table.returncode == 0 and "manifest hashes" in table.stderr and "all checks passed" in table.stderr

    (good / "bin" / "llama-server").write_bytes(b"tampered")
    bad = assemble("verify", str(good))
    assert bad.returncode == 1 and "verification FAILED" in bad.stderr and "bin/llama-server" in bad.stderr
    assert assemble("verify", str(tmp_path / "nowhere")).returncode == 2
    assert assemble("verify", str(good), "--no-such-flag").returncode == 2


# --- ROCm: Debian sid's rocBLAS and hipBLASLt, placed by the bundler -----------------------

# a stand-in for ggml's HIP module: its NEEDED are ggml-hip's, and an offload entry id for the card it
# "carries code for" (what check.static.hip_archs reads), so its manifest can say gfx1100 truthfully
HIP_PROBE = 'const char hip_bundle[] = "hipv4-amdgcn-amd-amdhsa--gfx1100";\nint hip_probe(void) { return 1; }\n'


@pytest.fixture(scope="module")
def rocm_runtime(cpu_runtime, tmp_path_factory) -> Path:
    """The cpu runtime plus a HIP module stand-in that links what ggml-hip links, bundled for gfx1100 from
    Debian sid; its manifest then states what the files say (refresh_facts, as the bundler would)."""
    rocm = get_or_skip(rocm_libs)
    tmp = tmp_path_factory.mktemp("rocm-verify")
    probe = compile_c(HIP_PROBE, tmp / "libggml-hip.so", "-shared")
    needs = ["libhipblas.so.2", "librocblas.so.4", "libamdhip64.so.6", "libhipblaslt.so.1"]
    subprocess.run(["patchelf", *[a for n in needs for a in ("--add-needed", n)], str(probe)], check=True)
    recipe_file = tmp / "hip.toml"
    recipe_file.write_text(f'name = "hip-test"\ndescription = "t"\nbackends = ["hip"]\n[pin]\nsha = "{"0" * 40}"\n'
                           '[[pin.mirrors]]\nkind = "local"\npath = "/nowhere"\n[hip]\ntargets = ["gfx1100"]\n')
    recipe = parse_recipe(recipe_file, recipe_file.read_text())
    plan = plan_bundle([OwnFile(probe, "bin/libggml-hip.so", "module")], search_dirs=[rocm.libdir], recipe=recipe)
    staging = tmp / "staging"
    staging.mkdir()
    result = place_bundle(plan, staging)
    runtime = copy_runtime(cpu_runtime, tmp / "runtime-rocm")
    for entry in (*(staging / "lib").iterdir(), staging / "bin" / "libggml-hip.so"):
        entry.rename(runtime / entry.relative_to(staging))
    data = read_raw(runtime)
    data["files"] += [dataclasses.asdict(f) for f in result.files]
    data["symlinks"] += [dataclasses.asdict(s) for s in result.symlinks]
    data["gpu_targets"] = {"cuda": [], "hip": ["gfx1100"]}
    data["recipe"]["backends"] = ["cpu", "hip"]
    # sid's ROCm needs a newer glibc than this host's: like a repair, the graft promises nothing, and the
    # tests below read it as a runtime for another host (verify --static: this host's glibc is a warning)
    data.pop("glibc_floor", None)
    write_raw(runtime, {k: v for k, v in data.items() if k not in ("schema", "created_by")})
    refresh_facts(runtime)
    return runtime


@pytest.fixture
def rocm_copy(rocm_runtime, tmp_path) -> Path:
    return copy_runtime(rocm_runtime, tmp_path / "runtime-rocm", link=True)


def rocblas_folder(runtime: Path) -> tuple[Path, str]:
    """The data folder the bundled rocBLAS reads, from its own strings (Debian: rocblas/<ver>/library)."""
    lib = next(p for p in (runtime / "lib").glob("librocblas.so*") if not p.is_symlink())
    versioned = section_strings(lib, rb"rocblas/[0-9][0-9.]*/library")
    assert versioned, "Debian's rocBLAS names its versioned data folder"
    return runtime / "lib" / versioned[0], versioned[0]


def test_rocm_runtime_passes_against_the_real_debian_layout(rocm_runtime):
    report = verify_runtime(rocm_runtime, static=True)
    checks = checks_of(report)
    assert report.passed, [(c.name, c.reason) for c in report.checks if c.status != PASS]
    _folder, rel = rocblas_folder(rocm_runtime)
    assert checks["rocBLAS data"].status == PASS
    assert checks["rocBLAS data"].reason.startswith(f"lib/{rel} (read from the library's strings)")
    assert checks["rocBLAS gfx1100"].status == PASS and "TensileLibrary_lazy_gfx1100.dat" in         checks["rocBLAS gfx1100"].reason
    assert checks["hipBLASLt data"].status == PASS and checks["hipBLASLt gfx1100"].status == PASS
    # libLLVM (through HIP's comgr) finds its libraries through RUNPATH: the bundler's pins must hold
    assert checks["LD_LIBRARY_PATH lookups"].status == PASS
    assert checks["libraries resolve"].status == PASS


def test_flattened_rocblas_folder(rocm_copy):
    folder, rel = rocblas_folder(rocm_copy)
    for p in list(folder.iterdir()):                    # what `cp -r SRC DST` does when DST is missing
        p.rename(folder.parent / p.name)
    folder.rmdir()
    reseal(rocm_copy)
    report = verify_runtime(rocm_copy, static=True)
    assert_only_failures(report, "rocBLAS data")
    reason = checks_of(report)["rocBLAS data"].reason
    assert f"reads lib/{rel}" in reason and f"its files sit in lib/{Path(rel).parent}/ instead: a flattened copy"         in reason
    assert "aborts at the first GEMM" in reason


def test_upstream_layout_for_a_debian_rocblas(rocm_copy):
    folder, rel = rocblas_folder(rocm_copy)
    upstream = rocm_copy / "lib" / "rocblas" / "library"
    folder.rename(upstream)
    shutil.rmtree(folder.parent)
    check = static(rocm_copy)["rocBLAS data"]
    assert check.status == FAIL
    assert (f"the data sits in lib/rocblas/library/ (the upstream layout), but this build of the library reads "
            f"lib/{rel}") in check.reason


def test_missing_gfx_kernels(rocm_copy):
    folder, _ = rocblas_folder(rocm_copy)
    gone = [p for p in folder.iterdir() if p.suffix in (".co", ".hsaco") and "gfx1100" in arch_tokens(p.name)]
    assert gone
    for p in gone:
        p.unlink()
    check = static(rocm_copy)["rocBLAS gfx1100"]
    assert check.status == FAIL and "no gfx1100 code objects" in check.reason


def test_target_the_data_does_not_cover(rocm_copy):
    """A runtime built for gfx1151 with Debian's rocBLAS (which has no gfx1151 kernels)."""
    data = read_raw(rocm_copy)
    data["gpu_targets"]["hip"] = ["gfx1151"]
    write_raw(rocm_copy, {k: v for k, v in data.items() if k not in ("schema", "created_by")})
    checks = static(rocm_copy)
    assert checks["rocBLAS gfx1151"].status == FAIL
    assert "no TensileLibrary_lazy_gfx1151.dat" in checks["rocBLAS gfx1151"].reason
    assert "archs present: gfx1100" in checks["rocBLAS gfx1151"].reason
    assert checks["hipBLASLt gfx1151"].status == WARN


def test_pruned_fallback_index(rocm_copy):
    folder, _ = rocblas_folder(rocm_copy)
    fallback = sorted(folder.glob("*_fallback.dat"))
    assert fallback
    fallback[0].unlink()
    check = static(rocm_copy)["rocBLAS gfx1100"]
    assert check.status == FAIL and fallback[0].name in check.reason and "fallback" in check.reason


@pytest.mark.parametrize("stray", ["library", "TensileLibrary_lazy_gfx1100.dat"])
def test_stray_data_in_lib(rocm_copy, stray):
    """lib/library/ is probed before rocblas/library (an empty folder is enough to win); files of the
    data folder directly in lib/ are a flattened copy."""
    target = rocm_copy / "lib" / stray
    if stray == "library":
        target.mkdir()
    else:
        folder, _ = rocblas_folder(rocm_copy)
        os.link(folder / stray, target)
    check = static(rocm_copy)["rocBLAS data"]
    assert check.status == FAIL
    expected = "stray folder lib/library/" if stray == "library" else "stray TensileLibrary* files directly in lib/"
    assert expected in check.reason


def test_missing_hipblaslt_data_is_a_warning(rocm_copy):
    shutil.rmtree(rocm_copy / "lib" / "hipblaslt")
    reseal(rocm_copy)
    report = verify_runtime(rocm_copy, static=True)
    check = checks_of(report)["hipBLASLt data"]
    assert check.status == WARN
    assert "lib/hipblaslt/library/ is missing" in check.reason and "falls back to slower kernels" in check.reason
    assert report.passed                                   # a warning, not a failure
    assert checks_of(report)["rocBLAS data"].status == PASS
