"""The gate watches the unit, not only HTTP: `systemctl show`'s properties read as a UnitState, each sign
of a crash (an exit status, a restart systemd made, a new main process, a failed or auto-restart state)
ends the wait at once, and the failure quotes the cause from the server's own lines (or systemd's, when
the server never ran), read from journalctl's JSON."""

from __future__ import annotations

import json
import time

from builder.check.dynamic import free_port
from builder.deploy.gate import gate
from builder.deploy.service import LogLine, UnitState, journal_lines, unit_state
from builder.deploy.watch import UnitWatch, crashed, said

RUNNING = {"ActiveState": "active", "SubState": "running", "MainPID": "412", "UnitFileState": "enabled",
           "NRestarts": "0", "ExecMainPID": "412", "ExecMainExitTimestampMonotonic": "0", "ExecMainCode": "0",
           "ExecMainStatus": "0"}


def test_systemctl_show_read_as_a_unit_state():
    assert unit_state(RUNNING) == UnitState("active", "running", 412, "enabled", 0, 412, None)
    exited = unit_state({**RUNNING, "ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0",
                         "ExecMainExitTimestampMonotonic": "99", "ExecMainCode": "1", "ExecMainStatus": "1"})
    assert (exited.main_pid, exited.exited) == (None, "status 1")
    killed = unit_state({**RUNNING, "ExecMainExitTimestampMonotonic": "99", "ExecMainCode": "3", "ExecMainStatus": "11"})
    assert killed.exited == "signal 11 (SIGSEGV), core dumped"
    assert unit_state({}).exited is None and unit_state({"NRestarts": "[not set]"}).n_restarts == 0


def test_each_sign_of_a_crash():
    first = unit_state(RUNNING)
    assert crashed(first, first) is None
    signs = {
        "with status 1, and systemd restarts it": dict(SubState="auto-restart", ActiveState="activating",
                                                       ExecMainExitTimestampMonotonic="9", ExecMainCode="1",
                                                       ExecMainStatus="1"),
        "and systemd restarted it (2 time(s))": dict(NRestarts="2", ExecMainPID="500", MainPID="500"),
        "(main pid 412, now 501)": dict(ExecMainPID="501", MainPID="501"),
        "(the unit is failed: failed)": dict(ActiveState="failed", SubState="failed", MainPID="0"),
    }
    for words, props in signs.items():
        assert crashed(first, unit_state({**RUNNING, **props})) == words


class Crashing:
    """A unit that runs for `after` polls of its state, then is waiting to be restarted after exit 1."""

    def __init__(self, after: int):
        self.polls, self.after = 0, after

    def state(self, unit):
        self.polls += 1
        if self.polls <= self.after:
            return unit_state(RUNNING)
        return unit_state({**RUNNING, "ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0",
                           "ExecMainExitTimestampMonotonic": "9", "ExecMainCode": "1", "ExecMainStatus": "1"})


def test_a_crash_ends_the_gate_at_once_not_at_its_timeout():
    start = time.monotonic()
    result = gate("127.0.0.1", free_port(), ("m",), timeout=300, proc=UnitWatch(Crashing(after=3), "x.service"))
    assert time.monotonic() - start < 5
    assert (result.passed, result.step) == (False, "health")
    assert result.detail == "llama-server exited with status 1, and systemd restarts it before /health"


BOUNDS = ("llama_model_load: error loading model: tensor 'output.weight' data is not within the file bounds, "
          "model is corrupted or incomplete")


def test_said_quotes_the_cause_and_the_last_line():
    log = (LogLine("assemble-x.service: Started", False), LogLine("load_backend: loaded CPU backend", True),
           LogLine(BOUNDS, True), LogLine("llama_model_load_from_file_impl: failed to load model", True),
           LogLine("main: exiting due to model loading error", True),
           LogLine("assemble-x.service: Main process exited, code=exited, status=1/FAILURE", False))
    assert said(log) == f"the server said: {BOUNDS} | main: exiting due to model loading error"


def test_said_quotes_systemd_when_the_server_never_ran():
    log = (LogLine("assemble-x.service: Failed to set up mount namespacing: /run/systemd/unit-root/srv/m.gguf: "
                   "No such file or directory", False),
           LogLine("assemble-x.service: Failed at step NAMESPACE spawning /opt/assemble/x/current/serve", False),
           LogLine("Failed to start assemble-x.service - llama-server of assemble deploy x.", False))
    assert said(log).startswith("systemd said: assemble-x.service: Failed to set up mount namespacing")
    assert said(log).endswith("| Failed to start assemble-x.service - llama-server of assemble deploy x.")
    assert said(()) == "the journal holds nothing from the unit since the switch"


def test_journal_json_read_by_transport():
    out = "\n".join(json.dumps(e) for e in (
        {"MESSAGE": "srv  load_model: loading", "_TRANSPORT": "stdout"},
        {"MESSAGE": "Started x.service", "_TRANSPORT": "journal"},
        {"MESSAGE": list(b"caf\xe9 bytes"), "_TRANSPORT": "stdout"},
        {"MESSAGE": None, "_TRANSPORT": "stdout"})) + "\nnot json\n"
    assert journal_lines(out) == (LogLine("srv  load_model: loading", True), LogLine("Started x.service", False),
                                  LogLine("caf\ufffd bytes", True))
