"""A layer split's placement proven on two real Vulkan devices: Mesa's lavapipe exposed twice
(GGML_VK_VISIBLE_DEVICES=0,0 makes ggml list Vulkan0 and Vulkan1, both llvmpipe), so the split is a real
split of two ggml devices, each with its own buffers, in CI without a GPU.

The suite's vulkan runtime serves the split at both contexts; the check passes on the 8-layer split model
verify makes, and fails on the 2-layer smoke model, where llama.cpp leaves Vulkan1 only the output layer
(the split serves, but it is not a split of the model): the real case the check exists for.
About 100 s and 30 s on 2 cores (measured 2026-12-02; lavapipe compiles its shaders at every start)."""

from __future__ import annotations

import json

from builder.check.report import FAIL, PASS
from builder.check.tinymodel import TINY, write_tiny_llama
from builder.check.verify import verify_runtime
from tests.support.common import assemble

TWO_LAVAPIPES = {"GGML_VK_VISIBLE_DEVICES": "0,0"}


def test_the_split_over_two_devices_is_proven(vulkan_runtime):
    report = verify_runtime(vulkan_runtime, smoke=True, extra_env=TWO_LAVAPIPES)
    checks = {c.name: c for c in report.checks}
    assert checks["--list-devices"].reason == "Vulkan0, Vulkan1"
    assert checks["smoke Vulkan0,Vulkan1 layer split"].status == PASS
    placed = checks["placement"]
    assert placed.status == PASS, placed
    assert "split Vulkan0 : Vulkan1 = " in placed.reason and "every device holds layers" in placed.reason
    assert "context 1024 -> 4096: Vulkan0 model " in placed.reason and "; Vulkan1 model " in placed.reason
    assert report.passed, [(c.name, c.reason) for c in report.checks if c.status == FAIL]


def test_a_split_that_leaves_a_device_no_layer_fails(vulkan_runtime, tmp_path):
    model = write_tiny_llama(tmp_path / "two-layers.gguf", TINY)
    proc = assemble("verify", str(vulkan_runtime), "--smoke", "--model", str(model), "--json",
                    "--check-env", "GGML_VK_VISIBLE_DEVICES=0,0")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["smoke Vulkan0,Vulkan1 layer split"]["status"] == PASS     # it serves ...
    placed = checks["placement"]                                            # ... but Vulkan1 holds no layer
    assert placed["status"] == FAIL
    assert "Vulkan1 holds 0.11 MiB of weights but no KV cache at context 1024" in placed["reason"]
    assert [c["name"] for c in checks.values() if c["status"] == FAIL] == ["placement"]
