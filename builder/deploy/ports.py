"""Who holds a TCP port: the listening socket in /proc/net/tcp{,6}, its inode, and the process whose
descriptors hold that inode. The switch never starts a server onto a port someone else holds."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from builder.errors import AssembleError, FAILED

LISTEN = "0A"     # TCP_LISTEN in /proc/net/tcp's st column
POLL = 0.2


@dataclass(frozen=True)
class Holder:
    port: int
    pid: int | None           # None: the socket is there but no process we may read holds it
    comm: str = ""
    cmdline: str = ""

    def describe(self) -> str:
        if self.pid is None:
            return f"port {self.port} is held by a listening socket whose process cannot be seen from here"
        return f"port {self.port} is held by pid {self.pid} ({self.comm}: {self.cmdline or '?'})"


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == LISTEN and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def port_holder(port: int, proc: Path = Path("/proc")) -> Holder | None:
    """The process listening on `port`, or None when nothing listens there."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for entry in sorted(proc.iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    return Holder(port, int(entry.name), _read(entry / "comm"),
                                  _read(entry / "cmdline").replace("\0", " ").strip())
            except OSError:
                continue
    return Holder(port, None)


def _read(p: Path) -> str:
    try:
        return p.read_bytes().decode(errors="replace").strip()
    except OSError:
        return ""


def wait_port_free(port: int, timeout: float, allowed_pid: int | None = None, why: str = "") -> None:
    """Return once nothing (but `allowed_pid`, the unit's own server) listens on `port`; after `timeout`
    seconds raise (exit 1) naming the holder."""
    deadline = time.monotonic() + timeout
    while True:
        holder = port_holder(port)
        if holder is None or (allowed_pid is not None and holder.pid == allowed_pid):
            return
        if time.monotonic() >= deadline:
            raise AssembleError(f"{holder.describe()}; it was not released within {timeout:.0f}s{why}",
                                where=f"port {port}", code=FAILED,
                                fix="stop that process (or its unit or container), or deploy with another --port")
        time.sleep(POLL)
