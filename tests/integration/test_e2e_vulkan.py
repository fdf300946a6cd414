"""The vulkan recipe end to end on Mesa's lavapipe (Vulkan on the CPU): Vulkan0 is listed
by the bundled runtime and answers a real request."""

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
