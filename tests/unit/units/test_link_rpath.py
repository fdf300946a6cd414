"""build links the final DT_RPATH, so the bundler copies our files byte for byte.

A small real CMake project laid out as llama.cpp lays out its build tree (libraries, a backend
module and a program, all in bin/) is configured with the plan's rpath defines, built with real
cmake and ninja, then bundled: every file carries DT_RPATH=$ORIGIN/../lib and no DT_RUNPATH,
none is edited (same bytes, same build-id), and the program runs from the moved runtime. The
file whose RPATH is anything else is still edited.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.units.plan import rpath_defines
from builder.digest import sha256_file
from builder.runtime.bundle import plan_bundle
from builder.runtime.layout import LINK_RPATH, own_file
from builder.runtime.place import place_bundle
from scripts.support.vendorlibs import compile_c, readelf_dynamic

PROJECT = """cmake_minimum_required(VERSION 3.16)
project(tiny C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_library(core SHARED core.c)
set_target_properties(core PROPERTIES VERSION 0.1.0 SOVERSION 0)
add_library(ggml-cpu MODULE mod.c)
target_link_libraries(ggml-cpu core)
add_executable(tool main.c)
target_link_libraries(tool core)
"""
SOURCES = {
    "core.c": 'const char *core_name(void) { return "core"; }\n',
    "mod.c": 'const char *core_name(void);\nconst char *mod_name(void) { return core_name(); }\n',
    "main.c": '#include <stdio.h>\nconst char *core_name(void);\nint main(void) { puts(core_name()); return 0; }\n',
}


def _build(tmp_path: Path, name: str, defines: tuple[tuple[str, str], ...]) -> Path:
    src = tmp_path / "p"
    if not src.exists():
        src.mkdir()
        (src / "CMakeLists.txt").write_text(PROJECT)
        for file, text in SOURCES.items():
            (src / file).write_text(text)
    build = tmp_path / name
    for cmd in (["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", *(f"-D{k}={v}" for k, v in defines)],
                ["cmake", "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return build / "bin"


def _own(bindir: Path):
    return [own_file(bindir / "tool", "executable"), own_file(bindir / "libggml-cpu.so", "module"),
            own_file(bindir / "libcore.so.0.1.0", "library", ("libcore.so.0",))]


@pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja")), reason="needs cmake and ninja")
def test_built_files_carry_the_final_rpath_and_are_copied_byte_for_byte(tmp_path):
    flags = "-Wl,-z,now"            # a recipe's own linker flags stay, ours come after
    defines = rpath_defines({"CMAKE_SHARED_LINKER_FLAGS": flags})
    assert dict(defines)["CMAKE_SHARED_LINKER_FLAGS"] == f"{flags} -Wl,--disable-new-dtags"
    bindir = _build(tmp_path, "linked", defines)
    own = _own(bindir)
    for f in own:
        facts = readelf_dynamic(f.source)
        assert facts.get("RPATH") == [LINK_RPATH] and "RUNPATH" not in facts, (f.source.name, facts)

    plan = plan_bundle(own)
    assert [o.rpath for o in plan.own] == [None, None, None], "a file that needs no edit was planned for one"
    rt = tmp_path / "rt"
    rt.mkdir()
    result = place_bundle(plan, rt)
    for f in own:
        assert sha256_file(rt / f.dest) == sha256_file(f.source), f"{f.dest} was rewritten"
    assert {r.path for r in result.files} == {f.dest for f in own}
    moved = tmp_path / "elsewhere"
    shutil.move(rt, moved)
    run = subprocess.run([str(moved / "bin/tool")], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert (run.returncode, run.stdout) == (0, "core\n"), run.stderr


def test_a_rpath_that_is_not_exactly_the_folders_needed_is_still_set(tmp_path):
    """RUNPATH, an extra folder, or a path not relative to $ORIGIN: the bundler edits the file."""
    src = tmp_path / "src"
    src.mkdir()
    compile_c(SOURCES["core.c"], src / "libcore.so.0", "-shared", "-Wl,-soname,libcore.so.0")
    for i, link in enumerate(("--enable-new-dtags,-rpath,$ORIGIN/../lib", "--disable-new-dtags,-rpath,$ORIGIN/../lib:$ORIGIN",
                              "--disable-new-dtags,-rpath,/opt/lib", "--disable-new-dtags,-rpath,$ORIGIN/../lib")):
        exe = compile_c(SOURCES["main.c"], src / f"tool{i}", f"-L{src}", "-l:libcore.so.0", f"-Wl,{link}")
        plan = plan_bundle([own_file(exe, "executable"), own_file(src / "libcore.so.0", "library")])
        assert (plan.own[0].rpath is None) == (i == 3), link


def test_a_recipe_that_chooses_its_own_rpath_keeps_it():
    """upstream's release build (RUNPATH=$ORIGIN, the repair tests' stand-in) is linked as the recipe says."""
    assert rpath_defines({"CMAKE_INSTALL_RPATH": "$ORIGIN", "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON"}) == ()
    assert rpath_defines({"CMAKE_SHARED_LINKER_FLAGS": "-Wl,--disable-new-dtags"}) == (
        ("CMAKE_BUILD_WITH_INSTALL_RPATH", "ON"), ("CMAKE_INSTALL_RPATH", LINK_RPATH),
        ("CMAKE_EXE_LINKER_FLAGS", "-Wl,--disable-new-dtags"), ("CMAKE_SHARED_LINKER_FLAGS", "-Wl,--disable-new-dtags"),
        ("CMAKE_MODULE_LINKER_FLAGS", "-Wl,--disable-new-dtags"))
