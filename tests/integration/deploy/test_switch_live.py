"""The switch and its rollback with real servers: releases of the suite's cpu runtime deployed into a
temporary tree, served by their own serve scripts under a small real process supervisor that speaks the
ServiceManager protocol (systemd itself is the guest tests' job: tests/integration/test_deploy_systemd.py).
A good release switches in and the previous goes to trash; a release whose server cannot start is rolled
back, the previous one serves again, and the failed one is in trash/ as .failed; the preflight runs the
serve script with a tiny model. Slow: they need the cpu runtime."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from builder.check.dynamic import free_port
from builder.check.tinymodel import write_tiny_llama
from builder.deploy import ledger as owned
from builder.deploy.layout import RUNTIME, SERVE, HostTree
from builder.deploy.release import stage
from builder.deploy.service import LogLine, UnitState
from builder.deploy.switch import (DeployRequest, Serving, Timeouts, _Run, _switch, deploy, make_plan, preflight,
                                   rollback)
from builder.errors import AssembleError
from builder.proc import stop


@dataclass
class Supervisor:
    """Runs `current/serve` of one tree as systemd would run ExecStart= with EnvironmentFile=: a plain child
    whose environment is PATH and the release's env file, its output in a log; stop/restart really end the
    process. The env file names the model as the image sees it (/tiny.gguf): `model` is where that file is
    here, as a chroot would map it (the release's files stay exactly as deploy wrote them)."""
    tree: HostTree
    log: Path
    model: Path
    proc: subprocess.Popen | None = None
    calls: list[str] = field(default_factory=list)

    def sysusers(self, conf): self.calls.append("sysusers")
    def daemon_reload(self): self.calls.append("daemon-reload")
    def enable(self, unit): self.calls.append("enable")
    def disable(self, unit): self.calls.append("disable")

    def stop(self, unit):
        self.calls.append("stop")
        if self.proc is not None:
            stop(self.proc)
            self.proc = None

    def restart(self, unit):
        self.stop(unit)
        self.calls.append("start")
        with open(self.log, "a") as out:
            env = {"PATH": "/usr/bin:/bin", **_env_file(self.tree.current / "env"), "LLAMA_ARG_MODEL": str(self.model)}
            self.proc = subprocess.Popen([str(self.tree.current / SERVE)], env=env, cwd="/", stdout=out,
                                         stderr=subprocess.STDOUT)

    def state(self, unit):
        if self.proc is None:
            return UnitState("inactive", "dead", None)
        if self.proc.poll() is not None:
            return UnitState("failed", f"exit-code {self.proc.returncode}", None)
        return UnitState("active", "running", self.proc.pid)

    def journal(self, unit, since):
        return tuple(LogLine(line, True) for line in self.log.read_text(errors="replace").splitlines())


def _env_file(path: Path) -> dict[str, str]:
    """KEY='value' lines, as systemd's EnvironmentFile= reads the env file deploy writes."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {k: v[1:-1] for k, v in pairs}


@pytest.fixture
def served(cpu_runtime, tmp_path):
    """A tree with one release of the cpu runtime in service under the supervisor: (tree, model, port, sup)."""
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    model = write_tiny_llama(root / "tiny.gguf")
    port = free_port()
    rt = tmp_path / "runtime-cpu"
    shutil.copytree(cpu_runtime, rt, symlinks=True)
    first = deploy(DeployRequest(str(rt), "chat", str(model), port=port, root=str(root)), None)
    tree = HostTree(root, "chat")
    sup = Supervisor(tree, tmp_path / "journal.log", model)
    sup.restart("u")
    yield tree, rt, model, port, sup, first.release
    sup.stop("u")


def _stage(tree: HostTree, rt: Path, model: Path, port: int, **kw):
    plan = make_plan(DeployRequest(str(rt), "chat", str(model), port=port, root=str(tree.root), **kw))
    run = _Run(tree, None)
    folder, run.ledger, _ = stage(tree, run.ledger, plan.release)
    return run, plan, folder


def _serves(port: int) -> bool:
    r = requests.post(f"http://127.0.0.1:{port}/completion", json={"prompt": "hi", "n_predict": 4}, timeout=60)
    return r.status_code == 200 and r.json()["tokens_predicted"] == 4


def test_a_good_release_switches_in_and_the_previous_goes_to_trash(served):
    tree, rt, model, port, sup, first = served
    run, plan, folder = _stage(tree, rt, model, port, env=("LLAMA_ARG_ALIAS=second",))
    run.service = sup
    assert preflight(folder, "tiny", 120).passed            # the serve script, a tiny model, a free port
    result, trashed = _switch(run, plan.release.release_id, Serving.of(plan.release.record["env"] | {
        "LLAMA_ARG_MODEL": str(model)}), first, Timeouts(gate=120, port=10))
    assert result.passed and tree.current_id() == plan.release.release_id
    assert result.devices.listed and any(d.startswith("CPU") for d in result.devices.listed)
    assert len(trashed) == 1 and trashed[0].startswith(first + ".") and (tree.trash / trashed[0]).is_dir()
    assert _serves(port)
    assert sup.calls[-6:] == ["sysusers", "daemon-reload", "stop", "enable", "stop", "start"], sup.calls
    back = rollback("chat", sup, Timeouts(gate=120, port=10), root=tree.root)       # --rollback
    assert back.gate.passed and back.release == first and tree.current_id() == first and _serves(port)
    assert not (tree.trash / trashed[0]).exists() and len(back.trashed) == 1
    assert back.trashed[0].startswith(plan.release.release_id + ".")


def test_a_release_whose_server_cannot_start_is_rolled_back(served):
    tree, rt, model, port, sup, first = served
    bad = rt.parent / "runtime-bad"
    shutil.copytree(rt, bad, symlinks=True)
    run, plan, folder = _stage(tree, bad, model, port, env=("LLAMA_ARG_ALIAS=bad",))
    run.service = sup
    for module in (folder / RUNTIME / "bin").glob("libggml-cpu-*.so"):
        module.unlink()                                     # removed after verify and copy: no CPU backend
    with pytest.raises(AssembleError) as e:
        _switch(run, plan.release.release_id, Serving.of(plan.release.record["env"] | {"LLAMA_ARG_MODEL": str(model)}),
                first, Timeouts(gate=60, port=10))
    assert e.value.code == 1 and "gate failed at health" in e.value.what
    assert "the previous release serves again" in e.value.what
    assert tree.current_id() == first and _serves(port)
    failed = [p.name for p in tree.trash.iterdir()]
    assert len(failed) == 1 and failed[0].endswith(".failed") and failed[0].startswith(plan.release.release_id)
    assert not tree.release(plan.release.release_id).exists()
    assert owned.owns(tree, owned.load(tree), tree.trash / failed[0])
    assert not tree.switch_record.exists() and '"what": "back to the previous release"' in tree.gate_record.read_text()


def test_a_held_port_stops_the_switch_before_anything_changes(served):
    tree, rt, model, port, sup, first = served
    sup.stop("u")
    holder = subprocess.Popen(["python3", "-c", ("import socket, sys, time; s = socket.socket(); "
                               f"s.bind(('127.0.0.1', {port})); s.listen(); print('ok', flush=True); time.sleep(300)")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        run, plan, folder = _stage(tree, rt, model, port, env=("LLAMA_ARG_ALIAS=third",))
        run.service = sup
        unit_before, calls_before = tree.unit.read_bytes(), len(sup.calls)
        with pytest.raises(AssembleError) as e:
            _switch(run, plan.release.release_id, Serving.of(plan.release.record["env"]), first,
                    Timeouts(gate=60, port=2))
        assert e.value.code == 1 and f"pid {holder.pid}" in e.value.what and "nothing was stopped" in e.value.what
        assert tree.current_id() == first and tree.unit.read_bytes() == unit_before
        assert sup.calls[calls_before:] == [] and os.path.isdir(folder)
    finally:
        holder.kill()
        holder.wait()
