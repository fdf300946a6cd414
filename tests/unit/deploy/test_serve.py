"""The serve script, run by bash against real folders: started through the `current` link it finds its
own release, reads its env file when started by hand, refuses in one line (exit 1) when the runtime, the
model or a backend's device is missing, and execs the release's own llama-server with its arguments."""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy.envfile import render_env
from builder.deploy.layout import ENV, RUNTIME, SERVE
from builder.deploy.model import read_model
from builder.deploy.serve import DEVICES, render_serve

# A stand-in server: a real executable that says who it is, what it was given, and what it sees.
FAKE_SERVER = """#!/bin/bash
echo "server $0 pid $$ args $* model=$LLAMA_ARG_MODEL port=$LLAMA_ARG_PORT"
"""


def release(tmp_path: Path, backends=("cpu",), model: Path | None = None) -> tuple[Path, Path]:
    """base/releases/r1 with a runtime, env and serve; base/current -> releases/r1. (current, model)"""
    model = model or write_tiny_llama(tmp_path / "tiny.gguf")
    rel = tmp_path / "base" / "releases" / "r1"
    (rel / RUNTIME / "bin").mkdir(parents=True)
    server = rel / RUNTIME / "bin" / "llama-server"
    server.write_text(FAKE_SERVER)
    server.chmod(0o755)
    (rel / ENV).write_text(render_env(read_model(model), str(model), 8123, backends).render())
    (rel / SERVE).write_text(render_serve(backends))
    (rel / SERVE).chmod(0o755)
    os.symlink("releases/r1", tmp_path / "base" / "current")
    return tmp_path / "base" / "current", model


def serve(current: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(current / SERVE), *args], env={"PATH": "/usr/bin:/bin", **(env or {})},
                          cwd="/", capture_output=True, text=True, timeout=30)


def refused(proc: subprocess.CompletedProcess, words: str) -> None:
    assert proc.returncode == 1 and proc.stdout == "", proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assemble serve: ") and words in lines[0], proc.stderr


def test_by_hand_it_reads_its_env_and_execs_its_own_server(tmp_path):
    current, model = release(tmp_path)
    proc = serve(current, "--verbose-prompt")
    real = (tmp_path / "base" / "releases" / "r1" / RUNTIME / "bin" / "llama-server")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(f"server {real} pid ")
    assert f"args --verbose-prompt model={model} port=8123" in proc.stdout


def test_exec_keeps_the_pid(tmp_path):
    """systemd's MainPID is the server itself: the script execs, it does not fork a child."""
    current, _ = release(tmp_path)
    p = subprocess.Popen([str(current / SERVE)], env={"PATH": "/usr/bin:/bin"}, stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert f"pid {p.pid} " in out


def test_the_environment_wins_over_the_file(tmp_path):
    """systemd passes the env file as the environment: the script does not read it again."""
    current, _ = release(tmp_path)
    other = write_tiny_llama(tmp_path / "other.gguf")
    proc = serve(current, env={"LLAMA_ARG_MODEL": str(other), "LLAMA_ARG_PORT": "9999"})
    assert proc.returncode == 0 and f"model={other} port=9999" in proc.stdout


def test_refuses_a_missing_runtime(tmp_path):
    current, _ = release(tmp_path)
    (current / RUNTIME / "bin" / "llama-server").unlink()
    refused(serve(current), "the runtime is missing")


def test_refuses_a_missing_or_foreign_model(tmp_path):
    current, model = release(tmp_path)
    model.rename(tmp_path / "moved.gguf")
    refused(serve(current), f"the model is missing or unreadable: {model}")
    model.write_bytes(b"<html>not a model</html>")
    refused(serve(current), "the model is not a GGUF file")


def test_refuses_an_unreadable_env_file(tmp_path):
    current, _ = release(tmp_path)
    (current / ENV).unlink()
    refused(serve(current), "LLAMA_ARG_MODEL is unset")


def test_refuses_when_a_backends_device_is_missing(tmp_path):
    absent = [b for b, (globs, _) in DEVICES.items() if not any(glob.glob(g) for g in globs)]
    assert absent, "every GPU backend's device is present here: this host cannot show the refusal"
    backend = absent[0]
    current, _ = release(tmp_path, backends=("cpu", backend))
    refused(serve(current), f"no {backend} device")


@pytest.mark.parametrize("backend", sorted(DEVICES))
def test_a_present_device_passes(tmp_path, backend):
    """Each backend's check really looks at its paths: the same script with the paths pointed at files that
    exist starts the server."""
    marker = tmp_path / f"dev-{backend}"
    marker.write_text("")
    current, _ = release(tmp_path, backends=("cpu", backend))
    script = (current / SERVE).read_text()
    for g in DEVICES[backend][0]:
        script = script.replace(f" {g}", f" {marker}")
    (current / SERVE).write_text(script)
    assert serve(current).returncode == 0
