"""The vulkan recipe end to end on Mesa's lavapipe (Vulkan on the CPU): Vulkan0 is listed
by the bundled runtime and answers a real request, and the runtime's own test-backend-ops judges it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


from builder.check.tinymodel import write_tiny_llama
from tests.support.common import assemble
from tests.support.server import complete, server

LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}  # ggml skips CPU Vulkan devices unless asked


def test_vulkan_device_listed_and_serving(vulkan_runtime, tmp_path):
    moved = tmp_path / "moved runtime"
    shutil.copytree(vulkan_runtime, moved, symlinks=True)
    m = json.loads((moved / "manifest.json").read_text())
    assert "vulkan" in m["recipe"]["backends"]
    assert (moved / "bin" / "libggml-vulkan.so").is_file()
    assert not list((moved / "lib").glob("libvulkan.so*"))  # the loader must match the host's drivers
    import subprocess
    listed = subprocess.run([str(moved / "bin" / "llama-server"), "--list-devices"], env=LAVAPIPE,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "Vulkan0:" in listed.stdout, listed.stdout + listed.stderr
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with server(moved, model, ["--device", "Vulkan0", "-ngl", "99"], LAVAPIPE, cwd) as (base, proc, _log):
        body = complete(base, n=12)
        assert body["tokens_predicted"] == 12
        # The work ran through the bundled Vulkan backend on Mesa's lavapipe driver.
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert str(moved / "bin" / "libggml-vulkan.so") in maps
        assert "libvulkan_lvp.so" in maps


def test_verify_smoke_vulkan(vulkan_runtime):
    proc = assemble("verify", str(vulkan_runtime), "--smoke", "--json", "--check-env", "GGML_VK_VISIBLE_DEVICES=0")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["smoke Vulkan0"]["status"] == "pass"
    assert "Vulkan0" in checks["--list-devices"]["reason"]


def test_without_the_env_variable_lavapipe_is_reported_not_run(vulkan_runtime):
    """With no Vulkan GPU visible, the device check says 'not run', never a silent pass."""
    proc = assemble("verify", str(vulkan_runtime), "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["load libggml-vulkan.so"]["status"] == "skip"
    assert "not run" in checks["load libggml-vulkan.so"]["reason"]


def test_the_runtime_carries_test_backend_ops_that_judges_vulkan0(vulkan_runtime, tmp_path):
    """[tests] backend_ops (on: the recipe has a GPU backend): tests/test-backend-ops, built from the same
    tree and defines, listed with role test, finds bin/'s modules through its links in tests/ and runs
    one op on Vulkan0 (lavapipe) against the CPU backend, from a moved copy and another working folder."""
    import re
    import subprocess
    moved = tmp_path / "moved runtime"
    shutil.copytree(vulkan_runtime, moved, symlinks=True)
    m = json.loads((moved / "manifest.json").read_text())
    judge = moved / "tests" / "test-backend-ops"
    assert judge.is_file() and {f["path"]: f["role"] for f in m["files"]}["tests/test-backend-ops"] == "test"
    modules = sorted(p.name for p in (moved / "bin").glob("libggml-*.so"))
    links = {s["path"]: s["target"] for s in m["symlinks"] if s["path"].startswith("tests/")}
    assert links == {f"tests/{name}": f"../bin/{name}" for name in modules} and "libggml-vulkan.so" in modules
    unit = m["units"][0]
    assert unit["defines"]["LLAMA_BUILD_TESTS"] == "ON" and unit["build"][-1] == "test-backend-ops"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run([str(judge), "test", "-b", "Vulkan0", "-o", "ADD"], env=LAVAPIPE, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"loaded Vulkan backend from {moved / 'tests' / 'libggml-vulkan.so'}" in out
    passed = re.search(r"(\d+)/(\d+) tests passed", out)
    assert passed and passed.group(1) == passed.group(2) and int(passed.group(1)) > 0, out[-3000:]
    assert "Backend Vulkan0: \x1b[1;32mOK" in out or "Backend Vulkan0: OK" in out, out[-3000:]
