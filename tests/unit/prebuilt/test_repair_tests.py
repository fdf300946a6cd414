"""repair carries test-backend-ops when an input has one (upstream's archives and build folders: beside
llama-server; a runtime made earlier: in tests/), to tests/ with its module links and role "test";
an input without one gives a runtime without tests/, as before. Real ELF files compiled here."""

from __future__ import annotations

import json
from pathlib import Path

from builder.check import integrity
from builder.prebuilt.discover import discover
from builder.runtime.layout import module_links_in_tests
from tests.support.common import assemble
from tests.unit.prebuilt.test_discover import _cc, make_build

RISK = ("--accept-loader-risk", "a test: no ggml installed here")


def _with_judge(folder: Path) -> Path:
    """make_build's bin/ plus a test-backend-ops linked as upstream's is (libllama, libggml, the base)."""
    root = make_build(folder)
    b = root / "bin"
    _cc(b / "test-backend-ops", "int llama_init(void);\nint main(void) { return llama_init() - 1; }\n",
        f"-L{b}", "-l:libllama.so.0.0.1", "-l:libggml.so.0.9.4", "-l:libggml-base.so.0.9.4")
    return root


def _repair(tmp_path: Path, *inputs: str, out: str) -> dict:
    proc = assemble("repair", *inputs, "--name", "t", "--out", out, "--verify-static", *RISK, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / out / "manifest.json").read_text())


def test_discover_takes_test_backend_ops_as_a_test_not_an_executable(tmp_path):
    f = discover(_with_judge(tmp_path / "build"))
    assert [x.source.name for x in f.executables] == ["llama-server"]
    assert [(x.source.name, x.kind, x.dest) for x in f.tests] == [("test-backend-ops", "test", "tests/test-backend-ops")]
    assert "test-backend-ops" in f.names, "--without may name it"
    assert discover(make_build(tmp_path / "plain")).tests == ()


def test_a_build_folders_test_backend_ops_is_carried_to_tests(tmp_path):
    _with_judge(tmp_path / "build")
    m = _repair(tmp_path, "build", out="runtime-t")
    rt = tmp_path / "runtime-t"
    roles = {f["path"]: f["role"] for f in m["files"]}
    assert roles["tests/test-backend-ops"] == "test" and "bin/test-backend-ops" not in roles
    modules = sorted(p.name for p in (rt / "bin").glob("libggml-*.so"))
    links = {(s["path"], s["target"]) for s in m["symlinks"] if s["path"].startswith("tests/")}
    assert links == set(module_links_in_tests(modules)) and len(links) == len(modules) > 1
    assert integrity.problems(rt) == []
    # a runtime made earlier, given again: its tests/ comes along (its links made again, not refused)
    m2 = _repair(tmp_path, "runtime-t", out="runtime-again")
    assert {f["path"]: f["role"] for f in m2["files"]}["tests/test-backend-ops"] == "test"
    assert {(s["path"], s["target"]) for s in m2["symlinks"] if s["path"].startswith("tests/")} == links


def test_no_test_backend_ops_no_tests_folder(tmp_path):
    make_build(tmp_path / "build")
    m = _repair(tmp_path, "build", out="runtime-t")
    assert not (tmp_path / "runtime-t" / "tests").exists()
    assert not [f for f in m["files"] if f["role"] == "test" or f["path"].startswith("tests/")]
    assert not [s for s in m["symlinks"] if s["path"].startswith("tests/")]


def test_a_broken_or_unwanted_test_backend_ops_is_left_out_not_refused(tmp_path):
    root = make_build(tmp_path / "build")
    (root / "bin" / "test-backend-ops").write_text("#!/bin/sh\nexit 0\n")
    m = _repair(tmp_path, "build", out="runtime-t")
    assert {"path": "build/bin/test-backend-ops", "reason": "a script, not a program"} in m["left_out"]
    assert not (tmp_path / "runtime-t" / "tests").exists()
    _with_judge(tmp_path / "judged")
    m = _repair(tmp_path, "judged", "--without", "test-backend-ops", out="runtime-without")
    assert {"path": "judged/bin/test-backend-ops", "reason": "--without"} in m["left_out"]
    assert not (tmp_path / "runtime-without" / "tests").exists()
