"""verify --static and --hip-target: the glibc floor, and the archs libggml-hip.so carries code for."""

from __future__ import annotations

import json
import shutil

import pytest

from builder.check import static as staticcheck
from builder.check.verify import FAIL, PASS, SKIP, WARN
from tests.conftest import assemble


@pytest.mark.parametrize("need, have, here, status", [
    ("2.36", "2.36", True, PASS), ("2.34", "2.39", True, PASS), ("2.38", "2.36", True, FAIL),
    ("2.38", "2.36", False, WARN), ("2.4", "2.36", True, PASS), ("2.38", None, True, SKIP), (None, "2.36", True, PASS),
])
def test_glibc_floor(need, have, here, status):
    check = staticcheck.glibc_check(need, have, here)
    assert check.status == status, check
    if status in (FAIL, WARN):
        assert f"needs glibc {need}, this host has {have}" in check.reason and check.hint


def _runtime_with_hip_module(tmp_path, payload: bytes):
    (tmp_path / "bin").mkdir(parents=True)
    (tmp_path / "bin" / "libggml-hip.so").write_bytes(b"\x7fELF" + b"\0" * 64 + payload + b"\0" * 64)
    return tmp_path


def test_hip_code_for_the_target_passes_and_a_sibling_does_not(tmp_path):
    rt = _runtime_with_hip_module(tmp_path, b"__CLANG_OFFLOAD_BUNDLE__\0hipv4-amdgcn-amd-amdhsa--gfx1100\0"
                                            b"host-x86_64-unknown-linux-gnu-\0")
    assert staticcheck.hip_archs(rt / "bin" / "libggml-hip.so") == ({"gfx1100"}, False)
    [ok] = staticcheck.hip_code_checks(rt, ("gfx1100",))
    assert ok.status == PASS and "gfx1100" in ok.reason
    [bad] = staticcheck.hip_code_checks(rt, ("gfx1100", "gfx1101:xnack-"))
    assert bad.status == FAIL and "not for gfx1101" in bad.reason and "--hip-target gfx1101" in bad.hint


def test_compressed_bundles_are_reported_not_run(tmp_path):
    rt = _runtime_with_hip_module(tmp_path, b"CCOB\x01\x00compressed")
    [check] = staticcheck.hip_code_checks(rt, ("gfx1100",))
    assert check.status == SKIP and "compressed" in check.reason


def test_no_hip_module_no_check(tmp_path):
    (tmp_path / "bin").mkdir()
    assert staticcheck.hip_code_checks(tmp_path, ("gfx1100",)) == []


@pytest.mark.slow
def test_static_verify_runs_nothing_and_reads_the_glibc_floor(cpu_runtime, tmp_path):
    rt = tmp_path / "rt"
    shutil.copytree(cpu_runtime, rt, symlinks=True)
    proc = assemble("verify", str(rt), "--static", "--json")
    assert proc.returncode == 0, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["devices, loader and smoke"]["status"] == "skip"
    assert checks["glibc floor"]["status"] == "pass"
    assert not any(name.startswith("load ") or name == "--list-devices" for name in checks)
    # a runtime that asks for a newer glibc than this host has: a warning with --static, a failure without
    data = json.loads((rt / "manifest.json").read_text())
    data["glibc_min"] = "9.99"
    (rt / "manifest.json").write_text(json.dumps(data))
    static = assemble("verify", str(rt), "--static", "--json")
    assert static.returncode == 0 and {c["name"]: c["status"] for c in json.loads(static.stdout)["checks"]}["glibc floor"] == "warn"
    full = assemble("verify", str(rt), "--json")
    assert full.returncode == 1 and any(c["name"] == "glibc floor" and c["status"] == "fail"
                                        for c in json.loads(full.stdout)["checks"])
    for bad in (["--static", "--smoke"], ["--hip-target", "gfx11"]):
        proc = assemble("verify", str(rt), *bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_build_can_verify_statically(cpu_runtime, tmp_path):
    """--verify-static: the runtime is checked by reading files only (built for another host)."""
    out = tmp_path / "runtime-cpu"
    proc = assemble("build", "--recipe", "cpu", "--out", str(out), "--verify-static")
    assert proc.returncode == 0, proc.stderr
    assert "devices, loader and smoke  SKIP  not run: --static reads files only" in proc.stderr
    assert "glibc floor" in proc.stderr and "--list-devices" not in proc.stderr
    both = assemble("build", "--recipe", "cpu", "--out", str(tmp_path / "x"), "--verify-static", "--no-verify")
    assert both.returncode == 2 and "contradict" in both.stderr and not (tmp_path / "x").exists()
