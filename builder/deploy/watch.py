"""The unit watched while it is gated, so a release that crashes fails its gate at the first crash.

With `Restart=on-failure` a server that dies at start never reaches `failed`: between two tries systemd
holds the unit in `activating (auto-restart)`, and an HTTP-only wait would poll /health for its whole
timeout (300 s by default) while the old release stays stopped. So the gate also reads the unit itself:
its automatic restarts (NRestarts), its main process (ExecMainPID, its exit status) and its state. The
first sign of a crash ends the wait; `said` then quotes what the server printed (the cause is in its own
log: "tensor 'output.weight' data is not within the file bounds"), or, when it never ran, what systemd
said of the unit (a mount namespace it could not set up).
"""

from __future__ import annotations

import re

from builder.deploy.service import LogLine, ServiceManager, UnitState

# A line worth quoting first: the server's, or systemd's, own word for what went wrong.
_CAUSE = re.compile(r"\berror\b|fail|couldn't|could not|cannot|can't|denied|refus|not permitted|no such", re.I)
_TAIL = 30          # only the end of the log is the failure's
_WIDTH = 240        # characters kept of each quoted line


def crashed(first: UnitState, now: UnitState) -> str | None:
    """How the start gated since `first` (read right after `systemctl restart`) has ended, or None while it
    runs. In the form the readiness wait prints after "llama-server exited"."""
    if now.exited is not None:
        return f"with {now.exited}" + (", and systemd restarts it" if now.sub == "auto-restart" else "")
    if now.n_restarts > first.n_restarts:
        return f"and systemd restarted it ({now.n_restarts - first.n_restarts} time(s))"
    if first.exec_pid is not None and now.exec_pid not in (None, first.exec_pid):
        return f"(main pid {first.exec_pid}, now {now.exec_pid})"
    if now.active in ("failed", "inactive", "deactivating") or now.sub == "auto-restart":
        return f"(the unit is {now.active}: {now.sub})"
    return None


class UnitWatch:
    """The unit seen as one process by the gate's readiness wait (builder.check.dynamic.ServerProcess):
    poll() is None while the start we asked for still runs."""

    def __init__(self, service: ServiceManager, unit: str):
        self.service, self.unit = service, unit
        self.first = service.state(unit)
        self.returncode: str | None = None

    def poll(self) -> str | None:
        if self.returncode is None:
            self.returncode = crashed(self.first, self.service.state(self.unit))
        return self.returncode


def said(log: tuple[LogLine, ...]) -> str:
    """What to quote of a failed start: the first line naming a cause among the server's last lines, and its
    last line; when the server printed nothing (it never ran), the same of systemd's lines on the unit."""
    for lines, who in (([ln.text for ln in log if ln.from_server], "the server"),
                       ([ln.text for ln in log if not ln.from_server], "systemd")):
        tail = [t.strip() for t in lines[-_TAIL:] if t.strip()]
        if not tail:
            continue
        picked = [next((t for t in tail if _CAUSE.search(t)), tail[-1]), tail[-1]]
        return f"{who} said: " + " | ".join(_short(t) for t in dict.fromkeys(picked))
    return "the journal holds nothing from the unit since the switch"


def server_text(log: tuple[LogLine, ...]) -> str:
    """The server's own output, as the boot-log readers (devices_from_log) take it."""
    return "\n".join(ln.text for ln in log if ln.from_server)


def _short(text: str) -> str:
    return text if len(text) <= _WIDTH else text[:_WIDTH - 3] + "..."
