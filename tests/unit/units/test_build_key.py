"""The build key names what the tools are, never where they were installed.

Two "installs" of the same tools are made here from the real ones (cmake with its modules, ninja,
ccache: hard links or copies at two prefixes, as two virtual environments hold them) and probed by
the real detection code. The same tools at other paths plan the same command lines, key and build
folder; another version or another binary does not. A small real CMake project is then built from
one install and again from the other, through plan_unit and run_unit as `assemble build` runs a host
unit: the second build runs nothing (tests/integration/test_second_venv.py does the same with real
pip-installed virtual environments, and with the cpu recipe)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from builder.units import run
from builder.units.plan import UnitPlan, plan_unit
from builder.config.options import HOST, CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.digest import sha256_file
from builder.errors import BuildFailed
from builder.toolchain import detect, toolstore
from builder.toolchain.detect import Tool, Toolchain
from tests.support.toolvenv import write_small_project

TREE = Path("/nonexistent/llama.cpp")


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _found(name: str) -> str:
    tool = detect.find_tool(name)
    assert tool is not None, f"{name} is missing: pip install -e '.[test]' and scripts/ci-setup.sh install it"
    return os.path.realpath(tool.path) if name != "cmake" else tool.path


def install(prefix: Path) -> Toolchain:
    """The test environment's cmake (its binary and modules), ninja and ccache laid out under prefix,
    as another virtual environment holds the same versions; probed as `build` probes them."""
    cmake = detect.cmake()
    assert cmake is not None and cmake.sha256, "the test environment's cmake did not say where it is"
    (prefix / "bin").mkdir(parents=True)
    _link_or_copy(cmake.binary, prefix / "bin" / "cmake")
    shutil.copytree(cmake.data, prefix / "share" / Path(cmake.data).name, copy_function=_link_or_copy)
    for name in ("ninja", "ccache"):
        _link_or_copy(_found(name), prefix / "bin" / name)
    return Toolchain(HOST, cmake=detect.cmake(path=str(prefix / "bin" / "cmake")),
                     ninja=detect.build_tool("ninja", path=str(prefix / "bin" / "ninja")),
                     cc=detect.compiler("cc"), cxx=detect.compiler("c++"), launcher_choice="ccache",
                     launcher=detect.build_tool("ccache", path=str(prefix / "bin" / "ccache")))


def plan(tc: Toolchain, source: Path = TREE, **cli) -> UnitPlan:
    config = resolve(load_recipe("cpu"), CliOptions(**cli), env={})
    return plan_unit(config, config.units[0], tc, source, None if source != TREE else config.recipe.pin.sha)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Two installs the tests only read."""
    root = tmp_path_factory.mktemp("installs")
    return install(root / "venv-a"), install(root / "venv-b")


@pytest.fixture
def two(tmp_path, isolated_cache):
    """Two installs a test may delete."""
    return install(tmp_path / "venv-a"), install(tmp_path / "venv-b")


def test_pypi_cmake_is_known_by_the_binary_that_runs():
    """PyPI's bin/cmake is a Python script; the build tree records the binary it starts."""
    tool = detect.cmake()
    assert Path(tool.path).read_bytes()[:2] == b"#!"                    # the wrapper
    assert Path(tool.binary).read_bytes()[:4] == b"\x7fELF"             # the real cmake
    assert tool.sha256 == sha256_file(tool.binary) and (Path(tool.data) / "Modules" / "CMake.cmake").is_file()


def test_same_tools_at_other_paths_plan_the_same_lines_key_and_folder(shared, isolated_cache):
    a, b = shared
    assert a.cmake.path != b.cmake.path and a.ninja.sha256 == b.ninja.sha256
    pa, pb = plan(a), plan(b)
    assert pa.key == pb.key and pa.build_dir == pb.build_dir
    assert pa.configure == pb.configure and pa.build == pb.build
    for line in (*pa.configure, *pa.build):
        assert "venv-a" not in line and "venv-b" not in line, line    # no install path reaches a command line
    # where they were found is still recorded, for the manifest
    assert pa.toolchain["cmake"]["path"] != pb.toolchain["cmake"]["path"]
    assert "/venv-a/" in pa.toolchain["launcher"]["path"] and "/venv-b/" in pb.toolchain["launcher"]["path"]


def test_another_cmake_ninja_or_launcher_version_gets_another_folder(shared, isolated_cache):
    a, _ = shared
    base = plan(a)
    for field in ("cmake", "ninja", "launcher"):
        tool = getattr(a, field)
        for change in ({"version": "1.11.1"}, {"sha256": "0" * 64}):
            other = plan(dataclasses.replace(a, **{field: dataclasses.replace(tool, **change)}))
            assert other.key != base.key and other.build_dir != base.build_dir, (field, change)


def test_another_compiler_binary_at_the_same_path_gets_another_folder(shared, isolated_cache, tmp_path):
    """A wrapper that answers --version and -dumpmachine exactly as gcc does is still another compiler."""
    a, _ = shared
    cc = tmp_path / "bin" / "cc"
    cc.parent.mkdir()
    shutil.copy2(a.cc.binary, cc)
    first = detect.compiler(str(cc))
    cc.unlink()
    cc.write_text(f'#!/bin/bash\nexec -a "$0" {a.cc.binary} "$@"\n')
    cc.chmod(0o755)
    second = detect.compiler(str(cc))
    assert (first.version, first.machine) == (second.version, second.machine) and first.machine
    assert first.sha256 != second.sha256
    k1, k2 = plan(dataclasses.replace(a, cc=first)).key, plan(dataclasses.replace(a, cc=second)).key
    assert k1 != k2


def test_a_tool_that_cannot_be_copied_keeps_its_path_in_lines_and_key(isolated_cache):
    """No digest (a container image's tools, an unreadable file): it runs from where it was found,
    so that path is part of the key."""
    def tc(where):
        return Toolchain(HOST, cmake=Tool("cmake", f"{where}/cmake", "3.31.6"), ninja=Tool("ninja", f"{where}/ninja", "1.12"),
                         cc=Tool("cc", "/usr/bin/cc", "gcc"), cxx=Tool("c++", "/usr/bin/c++", "g++"))
    pa, pb = plan(tc("/opt/a")), plan(tc("/opt/b"))
    assert pa.configure[0] == "/opt/a/cmake" and ("CMAKE_MAKE_PROGRAM", "/opt/a/ninja") in pa.defines
    assert pa.key != pb.key and not pa.stored


def test_the_copies_are_what_the_plan_names_and_outlive_the_install(two, tmp_path):
    a, _ = two
    p = plan(a)
    assert {str(s.program) for s in p.stored} == {p.cmake, dict(p.defines)["CMAKE_MAKE_PROGRAM"],
                                                 dict(p.defines)["CMAKE_C_COMPILER_LAUNCHER"]}
    for s in p.stored:
        assert not s.folder.exists()                 # planning writes nothing
        assert toolstore.ensure(s) == s.program and sha256_file(s.program) == s.sha256
    shutil.rmtree(tmp_path / "venv-a")               # the environment is upgraded, or deleted
    _version, command, root = detect.ask_cmake(p.cmake)
    assert command == p.cmake and Path(root).is_relative_to(Path(p.cmake).parent.parent)
    ninja = Path(dict(p.defines)["CMAKE_MAKE_PROGRAM"])
    before = ninja.stat().st_mtime_ns
    toolstore.ensure(next(s for s in p.stored if s.name == "ninja"))   # a second call changes nothing
    assert ninja.stat().st_mtime_ns == before


def test_a_changed_copy_or_a_foreign_folder_is_refused(shared, isolated_cache):
    a, _ = shared
    ninja = toolstore.stored(a.ninja)
    ninja.folder.mkdir(parents=True)
    (ninja.folder / "mine.txt").write_text("not assemble's")
    with pytest.raises(BuildFailed) as e:
        toolstore.ensure(ninja)
    assert "not a tool copy assemble made" in str(e.value) and (ninja.folder / "mine.txt").is_file()
    shutil.rmtree(ninja.folder)
    toolstore.ensure(ninja)
    ninja.program.unlink()
    ninja.program.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(BuildFailed) as e:
        toolstore.ensure(ninja)
    assert "changed since it was made" in e.value.what and e.value.where == str(ninja.folder)


def test_a_second_install_builds_nothing(two, tmp_path, monkeypatch):
    """The small project built from install A, then from install B (and with A gone): same folder,
    ninja has no work (no compile, no link, no `cmake -E` edge), the compiler cache saw no compile."""
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    a, b = two
    src = write_small_project(tmp_path / "small")
    pa = plan(a, src, targets=("hello",), jobs=2)
    run.run_unit(pa)
    assert (pa.build_dir / "bin" / "hello").is_file()
    built = {p: p.lstat().st_mtime_ns for p in [*pa.build_dir.rglob("*.o"), *(pa.build_dir / "bin").iterdir()]}
    ninja_log = (pa.build_dir / ".ninja_log").read_text()
    shutil.rmtree(tmp_path / "venv-a")
    pb = plan(b, src, targets=("hello",), jobs=2)
    assert pb.build_dir == pa.build_dir and pb.configure == pa.configure
    run.run_unit(pb)
    log = (pb.build_dir / run.LOG).read_text()
    assert log.rstrip().endswith("ninja: no work to do."), log[-2000:]
    assert (pb.build_dir / ".ninja_log").read_text() == ninja_log       # no edge ran
    assert {p: p.lstat().st_mtime_ns for p in built} == built and len(built) >= 6   # 2 objects, hello, the library, 2 links
    stats = pb.build_dir / "ccache-stats.log"
    assert not stats.exists() or not stats.read_text().strip()
    assert json.loads((pb.build_dir / run.CONFIGURED_STAMP).read_text())["configure"] == list(pb.configure)
