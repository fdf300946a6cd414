"""tests/ in a runtime ([tests] backend_ops): the test program placed with the build's DT_RPATH, one
relative link per backend module (ggml's loader looks next to the executable), role "test" in the
manifest; and integrity's rule for it: absent as a whole is a runtime packaged without tests, half
present is a failure. Real compiled files, real links, real runs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from builder.check import integrity
from builder.runtime import layout
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import read_elf
from builder.runtime.layout import OwnFile
from builder.runtime.manifest import LinkEntry, Manifest, check_files, sha256_file
from builder.runtime.place import place_bundle
from scripts.support.vendorlibs import compile_c
from tests.support.runtimes import make_runtime
from tests.unit.runtime.test_bundle import HOST, LOADER, MODULE


def test_the_layout_names_the_test_folder_and_its_module_links():
    assert layout.TESTS_DIR == "tests" and layout.BACKEND_OPS == "test-backend-ops"
    # tests/ is a sibling of bin/: the one DT_RPATH string the build links works from both
    assert layout.LINK_RPATH == "$ORIGIN/../lib"
    assert layout.module_links_in_tests(["libggml-vulkan.so", "libggml-cpu-haswell.so", "libggml-vulkan.so"]) == (
        ("tests/libggml-cpu-haswell.so", "../bin/libggml-cpu-haswell.so"),
        ("tests/libggml-vulkan.so", "../bin/libggml-vulkan.so"))
    assert layout.own_file(Path("/b/bin/test-backend-ops"), "test").dest == "tests/test-backend-ops"


def test_a_test_program_is_placed_in_tests_and_loads_bins_modules_through_its_links(tmp_path):
    """The program, as upstream's test-backend-ops does, dlopen()s libggml-cpu.so from its own folder
    (/proc/self/exe): the link in tests/ reaches bin/'s module, whose dependency resolves through
    the loader chain's DT_RPATH. Linked with the build's DT_RPATH, the program is copied byte for byte."""
    build = tmp_path / "build"
    build.mkdir()
    compile_c('const char *dep_probe(void) { return "real-dep"; }', build / "libdep.so.1", "-shared",
              "-Wl,-soname,libdep.so.1")
    compile_c(LOADER, build / "libggml.so.0", "-shared", "-Wl,-soname,libggml.so.0", "-ldl")
    module = compile_c(MODULE, build / "libggml-cpu.so", "-shared", f"-L{build}", "-l:libdep.so.1")
    exe = compile_c(HOST, build / "probe", f"-L{build}", "-l:libggml.so.0")
    judge = compile_c(HOST, build / layout.BACKEND_OPS, f"-L{build}", "-l:libggml.so.0",
                      f"-Wl,--disable-new-dtags,-rpath,{layout.LINK_RPATH}")
    own = [OwnFile(exe, "bin/probe", "executable"), OwnFile(build / "libggml.so.0", "lib/libggml.so.0", "library"),
           OwnFile(build / "libdep.so.1", "lib/libdep.so.1", "library"),
           OwnFile(module, "bin/libggml-cpu.so", "module"), layout.own_file(judge, "test")]
    plan = plan_bundle(own)
    assert plan.test_links == (("tests/libggml-cpu.so", "../bin/libggml-cpu.so"),)
    assert next(o for o in plan.own if o.kind == "test").rpath is None, "it carries LINK_RPATH: no edit"
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    result = place_bundle(plan, runtime)

    placed = runtime / "tests" / layout.BACKEND_OPS
    assert sha256_file(placed) == sha256_file(judge) and read_elf(placed).rpath == ("$ORIGIN/../lib",)
    roles = {f.path: f.role for f in result.files}
    assert roles["tests/test-backend-ops"] == "test" and roles["bin/probe"] == "own"
    assert result.size_by_role["test"] == placed.stat().st_size
    assert LinkEntry("tests/libggml-cpu.so", "../bin/libggml-cpu.so") in result.symlinks
    assert os.readlink(runtime / "tests" / "libggml-cpu.so") == "../bin/libggml-cpu.so"
    moved = tmp_path / "moved" / "runtime"
    shutil.copytree(runtime, moved, symlinks=True)
    proc = subprocess.run([str(moved / "tests" / layout.BACKEND_OPS)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "real-dep", (proc.stdout, proc.stderr)
    # without its link the program finds no module: the link is what makes tests/ work
    (moved / "tests" / "libggml-cpu.so").unlink()
    proc = subprocess.run([str(moved / "tests" / layout.BACKEND_OPS)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout.strip() == "NOT LOADED"


def test_no_test_program_no_links(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    module = compile_c("int f(void) { return 1; }", build / "libggml-cpu.so", "-shared")
    exe = compile_c("int main(void) { return 0; }", build / "probe")
    plan = plan_bundle([OwnFile(exe, "bin/probe", "executable"), OwnFile(module, "bin/libggml-cpu.so", "module")])
    assert plan.test_links == ()


def test_tests_absent_as_a_whole_is_intact_half_present_is_not(tmp_path):
    rt = make_runtime(tmp_path, with_tests=True)
    m = Manifest.load(rt)
    assert m.role_of("tests/test-backend-ops") == "test"
    assert LinkEntry("tests/libggml-cpu.so", "../bin/libggml-cpu.so") in m.symlinks
    assert check_files(rt, m) == [] and integrity.problems(rt) == []
    assert "tests/test-backend-ops" in m.licenses[0].covers, "llama.cpp's licence covers what was built from it"

    without = tmp_path / "without"
    shutil.copytree(rt, without, symlinks=True)
    shutil.rmtree(without / "tests")
    assert check_files(without, m) == [] and integrity.problems(without) == []
    hashes = next(c for c in integrity.checks(without, m, None, ("cpu",), ("cpu",)) if c.name == "manifest hashes")
    assert hashes.reason == (f"{len(m.files) - 1} files match their sha256 (tests/ left out as a whole: a runtime "
                             "packaged without its tests)")

    half = tmp_path / "half"
    shutil.copytree(rt, half, symlinks=True)
    (half / "tests" / "test-backend-ops").unlink()
    assert check_files(half, m) == ["tests/test-backend-ops: missing"]
    half_link = tmp_path / "half-link"
    shutil.copytree(rt, half_link, symlinks=True)
    (half_link / "tests" / "libggml-cpu.so").unlink()
    assert check_files(half_link, m) == ["tests/libggml-cpu.so: symlink missing"]
    empty = tmp_path / "empty"              # the folder there, its contents gone: not "absent as a whole"
    shutil.copytree(rt, empty, symlinks=True)
    shutil.rmtree(empty / "tests")
    (empty / "tests").mkdir()
    assert sorted(check_files(empty, m)) == ["tests/libggml-cpu.so: symlink missing", "tests/test-backend-ops: missing"]

    changed = tmp_path / "changed"          # present: checked like every file (content, mode)
    shutil.copytree(rt, changed, symlinks=True)
    os.chmod(changed / "tests" / "test-backend-ops", 0o644)
    assert any("tests/test-backend-ops is not executable" in p for p in integrity.problems(changed))


def test_a_planted_file_in_tests_is_caught_even_when_the_rest_is_absent(tmp_path):
    rt = make_runtime(tmp_path, with_tests=True)
    shutil.rmtree(rt / "tests")
    (rt / "tests").mkdir()
    (rt / "tests" / "libggml-cuda.so").write_bytes(b"planted")
    found = check_files(rt, Manifest.load(rt))
    assert "tests/libggml-cuda.so: not in the manifest (added after the build?)" in found
    assert "tests/test-backend-ops: missing" in found


def test_only_the_ops_record_may_sit_unlisted_at_the_root(tmp_path):
    """verify --ops writes ops-checks.json after the build: never listed (manifest.json's digest is the
    runtime's identity), so check_files accepts that one file, a regular one, and nothing else."""
    rt = make_runtime(tmp_path)
    m = Manifest.load(rt)
    (rt / layout.OPS_RECORD).write_text("{}")
    assert check_files(rt, m) == []
    (rt / "ops-checks.json.tmp").write_text("{}")
    (rt / "bin" / layout.OPS_RECORD).write_text("{}")
    assert sorted(check_files(rt, m)) == ["bin/ops-checks.json: not in the manifest (added after the build?)",
                                          "ops-checks.json.tmp: not in the manifest (added after the build?)"]
    (rt / "ops-checks.json.tmp").unlink()
    (rt / "bin" / layout.OPS_RECORD).unlink()
    (rt / layout.OPS_RECORD).unlink()
    os.symlink("manifest.json", rt / layout.OPS_RECORD)         # a link is no record
    assert check_files(rt, m) == ["ops-checks.json: not in the manifest (added after the build?)"]


def test_verify_static_checks_the_test_program_when_present(tmp_path):
    """Its closure and RPATH, like every own file's; a runtime without tests/ passes the same checks."""
    from builder.check.report import FAIL, PASS
    from builder.check.static import run as static_checks
    from builder.runtime.place import patchelf_tool
    rt = make_runtime(tmp_path, with_tests=True)
    m = Manifest.load(rt)
    judge = rt / "tests" / layout.BACKEND_OPS

    def checks() -> dict:
        return {c.name: c for c in static_checks(rt, m, ())}

    good = checks()
    assert good["RPATH of own files"].status == PASS and good["libraries resolve"].status == PASS
    assert good["RPATH of own files"].reason.startswith("3 files use DT_RPATH"), "bin/'s two and tests/'s one"
    os.chmod(judge, 0o755)
    subprocess.run([patchelf_tool(), "--set-rpath", "$ORIGIN/../lib", str(judge)], check=True)   # DT_RUNPATH
    bad = checks()["RPATH of own files"]
    assert bad.status == FAIL and "tests/test-backend-ops has DT_RUNPATH $ORIGIN/../lib" in bad.reason
    subprocess.run([patchelf_tool(), "--remove-rpath", str(judge)], check=True)
    subprocess.run([patchelf_tool(), "--force-rpath", "--set-rpath", "$ORIGIN/../lib", "--add-needed",
                    "libllama-gone.so.0", str(judge)], check=True)
    bad = checks()["libraries resolve"]
    assert bad.status == FAIL and "libllama-gone.so.0 (needed by tests/test-backend-ops) is not found" in bad.reason
    shutil.rmtree(rt / "tests")
    absent = checks()
    assert absent["RPATH of own files"].status == PASS and absent["libraries resolve"].status == PASS
