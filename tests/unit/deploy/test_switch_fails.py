"""How a switch fails, with the service manager played by a small fake that keeps systemd's contract (a
restart that cannot start the unit fails; a server that exits leaves an exit status and `auto-restart`) and
real HTTP servers on real ports: a release that crashes at start fails its gate at once, quoting the
server's own line, and the previous release serves again; a restart systemd refuses is a failed gate too;
on a first deploy nothing is left enabled or behind `current`; a failed release is always trash/*.failed and
never a --rollback target; a redeploy of what serves asks for nothing. The booted systemd does the same in
tests/integration/test_deploy_systemd.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.check.dynamic import free_port
from builder.check.tinymodel import write_tiny_llama
from builder.deploy.layout import FAILED_SUFFIX, RECORD, HostTree
from builder.deploy.release import stage
from builder.deploy.service import LogLine, UnitState
from builder.deploy.switch import DeployRequest, Serving, Timeouts, _Run, _switch, make_plan, rollback
from builder.errors import FAILED, AssembleError
from builder.proc import stop
from tests.support.runtimes import make_runtime

SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.send({"status": "ok"} if self.path == "/health" else {"data": [{"id": "/srv/tiny.gguf"}]})
    def do_POST(self):
        n = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["n_predict"]
        self.send({"content": "x" * n, "tokens_predicted": n, "timings": {"predicted_n": n}})
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
BOUNDS = "llama_model_load: error loading model: tensor 'output.weight' data is not within the file bounds"
CRASH = f"print({BOUNDS!r}); print('main: exiting due to model loading error'); raise SystemExit(1)"
NAMESPACE = "assemble-chat.service: Failed to set up mount namespacing: /run/systemd/unit-root/srv/m.gguf: No such file"


class FakeSystemd:
    """The unit as systemd runs it, for releases of one tree: `kinds` says how each release behaves
    (good: serves; crash: prints and exits 1 at start; unstartable: `systemctl restart` fails)."""

    def __init__(self, tree: HostTree, kinds: dict[str, str]):
        self.tree, self.kinds = tree, kinds
        self.calls: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.log: list[tuple[float, LogLine]] = []
        self.failed_start = False

    def sysusers(self, conf): self.calls.append("sysusers")
    def daemon_reload(self): self.calls.append("daemon-reload")
    def enable(self, unit): self.calls.append("enable")
    def disable(self, unit): self.calls.append("disable")

    def stop(self, unit):
        self.calls.append("stop")
        if self.proc is not None:
            stop(self.proc)
        self.proc, self.failed_start = None, False

    def restart(self, unit):
        self.stop(unit)
        self.calls.append("restart")
        rid = self.tree.current_id()
        kind = self.kinds.get(rid, "good")
        if kind == "unstartable":
            self.failed_start = True
            self.log.append((time.time(), LogLine(NAMESPACE, False)))
            raise AssembleError(f"`systemctl restart {unit}` failed (exit 1): See system logs", code=FAILED)
        port = json.loads((self.tree.release(rid) / RECORD).read_text())["port"]
        code = CRASH if kind == "crash" else SERVER
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE, text=True)
        if kind == "crash":
            for line in self.proc.communicate()[0].splitlines():
                self.log.append((time.time(), LogLine(line, True)))

    def state(self, unit):
        if self.failed_start:
            return UnitState("activating", "auto-restart", None, exec_pid=None, exited="status 226")
        if self.proc is None:
            return UnitState("inactive", "dead", None)
        if self.proc.poll() is not None:
            return UnitState("activating", "auto-restart", None, exec_pid=self.proc.pid,
                             exited=f"status {self.proc.returncode}")
        return UnitState("active", "running", self.proc.pid, exec_pid=self.proc.pid)

    def journal(self, unit, since):
        return tuple(line for t, line in self.log if t >= since)


@pytest.fixture
def tree(tmp_path):
    """An image tree with nothing deployed yet, a runtime and the model: (tree, runtime, model, port)."""
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    (root / "srv").mkdir()
    model = write_tiny_llama(root / "srv" / "tiny.gguf")
    return HostTree(root, "chat"), make_runtime(tmp_path / "rt"), model, free_port()


def staged(tree: HostTree, rt: Path, model: Path, port: int, alias: str, service: FakeSystemd):
    plan = make_plan(DeployRequest(str(rt), "chat", str(model), port=port, root=str(tree.root),
                                   env=(f"LLAMA_ARG_ALIAS={alias}",)))
    run = _Run(tree, service)
    _, run.ledger, _ = stage(tree, run.ledger, plan.release)
    return run, plan, Serving.of(plan.release.record["env"])


def in_service(tree, rt, model, port, kinds):
    """Release `good` switched in and serving under the fake: (its id, the fake)."""
    fake = FakeSystemd(tree, kinds)
    run, plan, serving = staged(tree, rt, model, port, "good", fake)
    assert _switch(run, plan.release.release_id, serving, None, Timeouts(gate=30, port=5))[0].passed
    return plan.release.release_id, fake


def test_a_release_that_crashes_at_start_is_out_at_its_first_crash(tree):
    tree, rt, model, port = tree
    good, fake = in_service(tree, rt, model, port, {})
    try:
        run, plan, serving = staged(tree, rt, model, port, "bad", fake)
        fake.kinds[plan.release.release_id] = "crash"
        start = time.monotonic()
        with pytest.raises(AssembleError) as e:
            _switch(run, plan.release.release_id, serving, good, Timeouts(gate=300, port=5))
        took = time.monotonic() - start
        assert took < 10, took                                          # not the 300 s gate
        what = e.value.what
        assert "gate failed at health: llama-server exited with status 1, and systemd restarts it" in what
        assert f"the server said: {BOUNDS} | main: exiting due to model loading error" in what
        assert "rolled back: the previous release serves again" in what and e.value.code == FAILED
        assert tree.current_id() == good and fake.proc.poll() is None    # the previous release serves
        trash = [p.name for p in tree.trash.iterdir()]
        assert trash == [p for p in trash if p.startswith(plan.release.release_id) and p.endswith(FAILED_SUFFIX)]
        with pytest.raises(AssembleError) as e:                          # a failed release is never a target
            rollback("chat", fake, root=tree.root)
        assert "holds no release to roll back to" in e.value.what
    finally:
        fake.stop("u")


def test_a_restart_systemd_refuses_is_a_failed_gate_and_rolls_back(tree):
    tree, rt, model, port = tree
    good, fake = in_service(tree, rt, model, port, {})
    try:
        run, plan, serving = staged(tree, rt, model, port, "bad", fake)
        fake.kinds[plan.release.release_id] = "unstartable"
        with pytest.raises(AssembleError) as e:
            _switch(run, plan.release.release_id, serving, good, Timeouts(gate=300, port=5))
        assert "gate failed at restart: `systemctl restart assemble-chat.service` failed" in e.value.what
        assert f"systemd said: {NAMESPACE}" in e.value.what and "the previous release serves again" in e.value.what
        assert tree.current_id() == good and fake.proc.poll() is None
        assert [p.name.endswith(FAILED_SUFFIX) for p in tree.trash.iterdir()] == [True]
    finally:
        fake.stop("u")


@pytest.mark.parametrize("kind", ["crash", "unstartable"])
def test_a_first_deploy_that_fails_leaves_nothing_enabled_or_current(tree, kind):
    tree, rt, model, port = tree
    fake = FakeSystemd(tree, {})
    run, plan, serving = staged(tree, rt, model, port, "bad", fake)
    fake.kinds[plan.release.release_id] = kind
    with pytest.raises(AssembleError) as e:
        _switch(run, plan.release.release_id, serving, None, Timeouts(gate=300, port=5))
    assert "nothing else was in service: assemble-chat.service is stopped and disabled" in e.value.what
    assert fake.calls[-2:] == ["stop", "disable"] and not tree.current.is_symlink()
    assert [p.name.startswith(plan.release.release_id) and p.name.endswith(FAILED_SUFFIX)
            for p in tree.trash.iterdir()] == [True]


def test_a_redeploy_of_what_serves_asks_systemd_for_nothing(tree):
    tree, rt, model, port = tree
    good, fake = in_service(tree, rt, model, port, {})
    try:
        run, plan, _ = staged(tree, rt, model, port, "good", fake)
        assert plan.release.release_id == good
        calls = list(fake.calls)
        assert run.serving_as_planned(plan) and fake.calls == calls
        fake.stop("u")                                                   # not running: it is not serving
        assert not run.serving_as_planned(plan)
    finally:
        fake.stop("u")
