"""The gate's steps against real HTTP servers: a real llama-server from the suite's cpu runtime passes
(slow: it builds the runtime), and a real HTTP server on a real socket that answers /health but gets a
later step wrong fails at that step, naming it; the boot log's devices are read from a real server's log."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.check.dynamic import free_port
from builder.deploy.gate import N_PREDICT, devices_from_log, gate
from builder.proc import stop

# A small real HTTP server whose later answers go wrong in one chosen way (argv: port, mode).
LIAR = r"""
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, mode = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health": return self.send(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self.send(200, {"data": [{"id": "other.gguf" if mode == "other-model" else "/m/tiny.gguf"}]})
        self.send(404, {})
    def do_POST(self):
        n = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["n_predict"]
        if mode == "dies": os._exit(3)                   # the first real request kills the server
        if mode == "short": return self.send(200, {"content": "x", "timings": {"predicted_n": n - 3}})
        if mode == "500": return self.send(500, {"error": "Cannot read TensileLibrary.dat"})
        self.send(200, {"content": "x" * n, "tokens_predicted": n, "timings": {"predicted_n": n, "predicted_per_second": 9.5}})
HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def liar(mode: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", LIAR, str(port), mode])
    return port, proc


@pytest.mark.parametrize("mode, step, words", [
    ("ok", None, f"a {N_PREDICT}-token completion at 9.5 t/s"),
    ("other-model", "models", "lists ['other.gguf'], not /m/tiny.gguf"),
    ("dies", "completion", "the first request failed"),
    ("short", "completion", f"asked for {N_PREDICT} tokens, the answer carries {N_PREDICT - 3}"),
    ("500", "completion", "answered 500: {\"error\": \"Cannot read TensileLibrary.dat\"}"),
])
def test_each_step_fails_by_name(mode, step, words):
    port, proc = liar(mode)
    try:
        result = gate("127.0.0.1", port, ("/m/tiny.gguf", "tiny.gguf"), timeout=30)
    finally:
        stop(proc, grace=2)
    assert result.passed == (step is None) and result.step == step, result
    assert words in result.detail, result.detail


def test_a_server_that_exits_ends_the_wait_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(4)"])
    proc.wait()
    start = time.monotonic()
    result = gate("127.0.0.1", free_port(), ("m",), timeout=60, proc=proc)
    assert time.monotonic() - start < 5
    assert (result.passed, result.step) == (False, "health") and "exited 4" in result.detail


def test_nothing_listening_times_out_at_health():
    result = gate("127.0.0.1", free_port(), ("m",), timeout=1)
    assert (result.passed, result.step) == (False, "health") and "not ok after 1s" in result.detail


def test_the_boot_log_of_the_h200_run_is_read():
    """The devices and model buffers of the H200 deploy run's boot log (docs/results): the buffer lines are
    read by the placement check's reader, the one parser of them."""
    log = Path(__file__).resolve().parents[3] / "docs/results/h200-2026-12-01/deploy/serve-log-excerpt.txt"
    devices = devices_from_log(log.read_text())
    assert devices.listed == ("CUDA0: NVIDIA H200 (143155 MiB, 142612 MiB free)",
                              "Vulkan0: NVIDIA H200 (143771 MiB, 142612 MiB free)")
    assert devices.model_buffers == ("CPU_Mapped 72.52 MiB", "CUDA0 1008.19 MiB")
