"""Helpers for the end-to-end tests: start the real server from a runtime and talk to it."""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from builder.proc import stop


def decoy_folder(root: Path) -> Path:
    """A folder for LD_LIBRARY_PATH holding non-ELF files named like the runtime's own libraries:
    a runtime that ever looks there first fails to start."""
    decoy = root / "decoy"
    decoy.mkdir()
    for name in ("libllama.so.0", "libggml-base.so.0", "libggml.so.0"):
        (decoy / name).write_bytes(b"not an ELF file: loading this must never happen\n")
    return decoy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(runtime: Path, model: Path, args: list[str], env: dict, cwd: Path, timeout: float = 300,
           wrapper: tuple[str, ...] = ()):
    """llama-server from `runtime` with exactly `env` (nothing inherited), started under `wrapper`
    (e.g. qemu-x86_64 -cpu Nehalem) if given; yields (base URL, process, log)."""
    port = free_port()
    log = cwd / f"server-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([*wrapper, str(runtime / "bin" / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                                 "--port", str(port), "-c", "2048", "-np", "1", *args],
                                env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert proc.poll() is None, f"llama-server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            try:
                if requests.get(base + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"no /health in {timeout}s:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
        yield base, proc, log
    finally:
        stop(proc, grace=20)


def complete(base: str, n: int = 16, prompt: str = "The capital of France is") -> dict:
    resp = requests.post(base + "/completion", json={"prompt": prompt, "n_predict": n, "temperature": 0,
                                                      "ignore_eos": True}, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()
