"""One sccache server per build: started with this build's settings, read and stopped after it.

sccache's client hands each compile to a server process, and the server reads its SCCACHE_*
settings only when it starts. A server left running by another build (another store, another base
folder) would serve ours with its settings and mix its counters into ours. So each build starts its
own server on a free port (SCCACHE_SERVER_PORT, inherited by every client the build runs), reads
its counters as JSON at the end (the manifest's units[].cache) and stops it.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from builder import proc
from builder.units import cachestats
from builder.config.remotecache import RemoteCache
from builder.errors import BuildFailed
from builder.paths import socket_parent

START_TIMEOUT = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(sccache: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[Any]:
    return proc.run([sccache, *args], env=env, timeout=START_TIMEOUT)


class Server:
    """The environment the build's compiles need to reach our server; its counters once it stopped."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.stats: cachestats.CacheStats | None = None


@contextmanager
def dedicated(sccache: str, env: dict[str, str], remote: RemoteCache | None, where: str) -> Iterator[Server]:
    """A server of our own for the `with` body; on the way out its counters are read and it stops."""
    # the server makes a unix socket under TMPDIR: a build's own TMPDIR is too deep for one
    server = Server({**env, "SCCACHE_SERVER_PORT": str(_free_port()), "TMPDIR": str(socket_parent())})
    fix = "check `sccache --start-server` with the same environment, or build with --launcher ccache"
    try:
        started = _run(sccache, ["--start-server"], server.env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildFailed(f"sccache did not start its server: {e}", where=where, fix=fix) from None
    if started.returncode != 0:
        raise BuildFailed(f"sccache did not start its server: {proc.last_line(started)}", where=where, fix=fix)
    try:
        yield server
    finally:
        server.stats = _stop(sccache, server.env, remote)


def _stop(sccache: str, env: dict[str, str], remote: RemoteCache | None) -> cachestats.CacheStats | None:
    try:
        shown = _run(sccache, ["--show-stats", "--stats-format=json"], env)
        if shown.returncode == 0:
            return cachestats.from_sccache(json.loads(shown.stdout), remote)
        return None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None                # no counters: the build itself is not worse for it
    finally:
        try:
            _run(sccache, ["--stop-server"], env)
        except (OSError, subprocess.TimeoutExpired):
            pass
