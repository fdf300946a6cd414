"""The one door to the service manager. The switch talks to a ServiceManager; the real one runs
systemctl, systemd-sysusers and journalctl; --dry-run and --root use a Recorder, which runs nothing and
keeps every command it was asked to run, so the operator sees them."""

from __future__ import annotations

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

    def as_dict(self) -> dict[str, Any]:
        return {"active": self.active, "sub": self.sub, "main_pid": self.main_pid, "enabled": self.enabled}


class ServiceManager(Protocol):
    def sysusers(self, conf: str) -> None: ...
    def daemon_reload(self) -> None: ...
    def enable(self, unit: str) -> None: ...
    def disable(self, unit: str) -> None: ...
    def stop(self, unit: str) -> None: ...
    def restart(self, unit: str) -> None: ...
    def state(self, unit: str) -> UnitState: ...
    def journal(self, unit: str, since: str) -> str: ...


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
        out = _checked(["systemctl", "show", unit, "--property=ActiveState,SubState,MainPID,UnitFileState"])
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        pid = int(props.get("MainPID", "0") or 0)
        return UnitState(props.get("ActiveState", "?"), props.get("SubState", "?"), pid or None,
                         props.get("UnitFileState", ""))

    def journal(self, unit: str, since: str) -> str:
        proc = run(["journalctl", "-u", unit, "--since", since, "-o", "cat", "--no-pager"], timeout=TIMEOUT)
        return proc.stdout if proc.returncode == 0 else ""


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

    def journal(self, unit: str, since: str) -> str:
        return ""
