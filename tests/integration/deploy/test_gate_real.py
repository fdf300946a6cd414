"""The gate against a real llama-server from the suite's cpu runtime: slow tier (the quick gate tests,
against a small HTTP server that fails each step, stay in tests/unit/deploy/test_gate.py)."""

from __future__ import annotations

import subprocess

from builder.check.dynamic import free_port
from builder.check.tinymodel import write_tiny_llama
from builder.deploy.gate import N_PREDICT, devices_from_log, gate
from builder.proc import stop


def test_a_real_llama_server_passes_and_says_its_devices(cpu_runtime, tmp_path):
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    port = free_port()
    log = tmp_path / "server.log"
    env = {"LLAMA_ARG_MODEL": str(model), "LLAMA_ARG_PORT": str(port), "LLAMA_ARG_N_PARALLEL": "1",
           "LLAMA_ARG_LOG_VERBOSITY": "4"}
    with open(log, "w") as out:
        proc = subprocess.Popen([str(cpu_runtime / "bin" / "llama-server")], env=env, cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        result = gate("127.0.0.1", port, (str(model), model.name), timeout=120, proc=proc)
        wrong = gate("127.0.0.1", port, ("another.gguf",), timeout=30, proc=proc)
    finally:
        stop(proc)
    assert result.passed and result.predicted == N_PREDICT, result
    assert (wrong.passed, wrong.step) == (False, "models")
    devices = devices_from_log(log.read_text())
    assert any(d.startswith("CPU: ") for d in devices.listed), devices
    assert devices.backends and all(f" from {cpu_runtime}/bin/libggml-cpu-" in b for b in devices.backends)
    assert any(b.startswith("CPU") and b.endswith("MiB") for b in devices.model_buffers), devices
