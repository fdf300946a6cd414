"""A libggml with libstdc++'s filesystem code linked in (-static-libstdc++; the cuda-vulkan build on the
H200 host, Ubuntu 24.04 with g++ 13.3, came out so) defines std::filesystem::current_path itself and
imports getcwd for it whether or not the loader calls it: its symbols cannot tell the patched loader from
the unpatched one. verify --static then believes the manifest's record of the loader patch (the files are
checked against the manifest's hashes) and otherwise warns, naming the dynamic verify that decides; it
never fails a patched build for it (it did: deploy and package refused the H200 runtime)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder.check.prebuiltloader import CWD_NAME, cwd_search_check
from builder.check.report import FAIL, PASS, WARN
from builder.prebuilt.loader import cwd_reading

# the two loaders: the patched one never asks for the working directory, the unpatched one does
PATCHED = """#include <filesystem>
extern "C" int ggml_backend_load_all(const char *dir) { std::error_code ec; return std::filesystem::exists(dir, ec); }
"""
UNPATCHED = """#include <filesystem>
extern "C" int ggml_backend_load_all(const char *dir) {
    std::error_code ec; return std::filesystem::exists(std::filesystem::current_path(ec) / dir, ec); }
"""


def _runtime(folder: Path, source: str, static_libstdcxx: bool = True) -> Path:
    (folder / "lib").mkdir(parents=True)
    (folder / "loader.cpp").write_text(source)
    subprocess.run(["g++", "-O2", "-std=c++17", "-fPIC", "-shared", *(["-static-libstdc++"] if static_libstdcxx else []),
                    "-Wl,-soname,libggml.so.0", str(folder / "loader.cpp"), "-o", str(folder / "lib/libggml.so.0.9.4")],
                   check=True)
    return folder


def test_linked_in_filesystem_code_is_told_apart_from_an_import(tmp_path):
    for name, source in (("patched", PATCHED), ("unpatched", UNPATCHED)):
        reading = cwd_reading(_runtime(tmp_path / name, source) / "lib/libggml.so.0.9.4")
        assert reading.linked_in and reading.imported == ("getcwd",), (name, reading)
    shared = cwd_reading(_runtime(tmp_path / "shared", UNPATCHED, static_libstdcxx=False) / "lib/libggml.so.0.9.4")
    assert not shared.linked_in and shared.imported == ("std::filesystem::current_path",)


def test_the_manifest_record_decides_and_nothing_else_passes(tmp_path):
    rt = _runtime(tmp_path / "rt", PATCHED)
    patched = cwd_search_check(rt, None, patched=True)
    assert patched.status == PASS and patched.name == CWD_NAME
    assert "backend-loader-no-cwd patch (manifest)" in patched.reason and "linked in statically" in patched.reason
    unknown = cwd_search_check(rt, None, patched=False)
    assert unknown.status == WARN and "without --static" in unknown.hint
    assert cwd_search_check(rt, "a test", patched=False).status == WARN
    # an imported current_path is the unpatched loader's own call: the manifest's word does not clear it
    shared = _runtime(tmp_path / "shared", UNPATCHED, static_libstdcxx=False)
    assert cwd_search_check(shared, None, patched=True).status == FAIL
