"""The one door to the service manager. The switch talks to a ServiceManager; the real one runs
systemctl, systemd-sysusers and journalctl; --dry-run and --root use a Recorder, which runs nothing and
keeps every command it was asked to run, so the operator sees them."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from typing import Any, Protocol

from builder.errors import FAILED, AssembleError
from builder.proc import command_line, last_line, run

TIMEOUT = 120


@dataclass(frozen=True)
class UnitState:
    active: str               # ActiveState: active, inactive, failed, activating, ...
    sub: str                  # SubState: running, dead, auto-restart, ...
    main_pid: int | None      # None when no process runs
    enabled: str = ""         # UnitFileState: enabled, disabled, ...
    # What the gate watches to see a crash at once, not after its timeout (Restart=on-failure hides a
    # crash loop from ActiveState: between two tries the unit is "activating (auto-restart)"):
    n_restarts: int = 0                 # NRestarts: automatic restarts since the last start we asked for
    exec_pid: int | None = None         # ExecMainPID: the main process of this start (kept after it exits)
    exited: str | None = None           # how that process ended ("status 1", "signal 11 (SIGSEGV)"); None: runs

    def as_dict(self) -> dict[str, Any]:
        return {"active": self.active, "sub": self.sub, "main_pid": self.main_pid, "enabled": self.enabled,
                "n_restarts": self.n_restarts, "exited": self.exited}


@dataclass(frozen=True)
class LogLine:
    """One journal entry of the unit: the server's own output (its stdout and stderr), or the service
    manager's word about the unit (a failed mount namespace, a start that failed)."""
    text: str
    from_server: bool


class ServiceManager(Protocol):
    def sysusers(self, conf: str) -> None: ...
    def daemon_reload(self) -> None: ...
    def enable(self, unit: str) -> None: ...
    def disable(self, unit: str) -> None: ...
    def stop(self, unit: str) -> None: ...
    def restart(self, unit: str) -> None: ...
    def state(self, unit: str) -> UnitState: ...
    def journal(self, unit: str, since: float) -> tuple[LogLine, ...]: ...


def _checked(argv: list[str]) -> str:
    try:
        proc = run(argv, timeout=TIMEOUT)
    except FileNotFoundError:
        raise AssembleError(f"{argv[0]} is not installed here; deploy starts the unit through systemd",
                            where=argv[0], fix="deploy on a host booted with systemd, or write an image's tree "
                                                "with --root DIR") from None
    if proc.returncode != 0:
        raise AssembleError(f"`{command_line(argv)}` failed (exit {proc.returncode}): {last_line(proc)}", code=FAILED,
                            fix="see `journalctl -xe` and `systemctl status` for the unit")
    return str(proc.stdout)


class Systemctl:
    """The live host's systemd."""

    def sysusers(self, conf: str) -> None:
        _checked(["systemd-sysusers", conf])

    def daemon_reload(self) -> None:
        _checked(["systemctl", "daemon-reload"])

    def enable(self, unit: str) -> None:
        _checked(["systemctl", "enable", unit])

    def disable(self, unit: str) -> None:
        _checked(["systemctl", "disable", unit])

    def stop(self, unit: str) -> None:
        _checked(["systemctl", "stop", unit])

    def restart(self, unit: str) -> None:
        if self.state(unit).active == "failed":     # a unit past its start limit refuses to start until reset
            _checked(["systemctl", "reset-failed", unit])
        _checked(["systemctl", "restart", unit])

    def state(self, unit: str) -> UnitState:
        out = _checked(["systemctl", "show", unit, f"--property={','.join(_PROPERTIES)}"])
        return unit_state(dict(line.split("=", 1) for line in out.splitlines() if "=" in line))

    def journal(self, unit: str, since: float) -> tuple[LogLine, ...]:
        """The unit's journal from `since` (seconds since the epoch) on: the server's lines are those of
        the stdout transport (what it printed), the rest is systemd speaking of the unit. Not `-u`: it takes
        UNIT= only from PID 1, and misses what systemd's forked child says before exec ("Failed to set up
        mount namespacing"); that child logs as root with UNIT= set, like PID 1 (measured, systemd 252)."""
        proc = run(["journalctl", f"_SYSTEMD_UNIT={unit}", "+", f"UNIT={unit}", "_UID=0", f"--since=@{since:.6f}",
                    "-o", "json", "--output-fields=MESSAGE,_TRANSPORT", "--no-pager"], timeout=TIMEOUT)
        return journal_lines(proc.stdout) if proc.returncode == 0 else ()


_PROPERTIES = ("ActiveState", "SubState", "MainPID", "UnitFileState", "NRestarts", "ExecMainPID",
               "ExecMainExitTimestampMonotonic", "ExecMainCode", "ExecMainStatus")
_CLD_KILLED, _CLD_DUMPED = "2", "3"      # ExecMainCode (1: exited): how waitid() said the process ended


def unit_state(props: dict[str, str]) -> UnitState:
    """`systemctl show` properties as a UnitState. A main process has ended when its exit time is set
    (systemd clears it at each start)."""
    def num(key: str) -> int:
        value = props.get(key, "0")
        return int(value) if value.isdigit() else 0

    exited = None
    if num("ExecMainExitTimestampMonotonic") and num("ExecMainPID"):
        status, code = num("ExecMainStatus"), props.get("ExecMainCode")
        if code in (_CLD_KILLED, _CLD_DUMPED):
            try:
                name = f" ({signal.Signals(status).name})"
            except ValueError:
                name = ""
            exited = f"signal {status}{name}" + (", core dumped" if code == _CLD_DUMPED else "")
        else:
            exited = f"status {status}"
    return UnitState(props.get("ActiveState", "?"), props.get("SubState", "?"), num("MainPID") or None,
                     props.get("UnitFileState", ""), num("NRestarts"), num("ExecMainPID") or None, exited)


def journal_lines(out: str) -> tuple[LogLine, ...]:
    """journalctl -o json lines as LogLines; a MESSAGE journald kept as bytes (not UTF-8) is decoded."""
    lines = []
    for raw in out.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):
            message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode(errors="replace")
        if isinstance(message, str):
            lines.append(LogLine(message, entry.get("_TRANSPORT") == "stdout"))
    return tuple(lines)


@dataclass
class Recorder:
    """Runs nothing: keeps the commands a real run would run (for --dry-run and --root)."""
    commands: list[str] = field(default_factory=list)

    def _say(self, *argv: str) -> None:
        self.commands.append(command_line(list(argv)))

    def sysusers(self, conf: str) -> None:
        self._say("systemd-sysusers", conf)

    def daemon_reload(self) -> None:
        self._say("systemctl", "daemon-reload")

    def enable(self, unit: str) -> None:
        self._say("systemctl", "enable", unit)

    def disable(self, unit: str) -> None:
        self._say("systemctl", "disable", unit)

    def stop(self, unit: str) -> None:
        self._say("systemctl", "stop", unit)

    def restart(self, unit: str) -> None:
        self._say("systemctl", "restart", unit)

    def state(self, unit: str) -> UnitState:
        return UnitState("unknown", "not asked: --root or --dry-run runs nothing", None)

    def journal(self, unit: str, since: float) -> tuple[LogLine, ...]:
        return ()
