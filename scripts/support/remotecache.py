"""A real Redis server and two "machines" for the shared compile cache: used by
tests/integration/test_remote_cache.py, scripts/bench-remote-cache.py and scripts/check-container-cache.py.

A machine is another HOME (so another assemble cache and ccache folder), another checkout path
of the recipe and another working directory, as two CI runners have; it starts with nothing
cached but the llama.cpp sdist download (a runner's HTTP cache would have it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scripts.support.heavy import compiles
from scripts.support.vendorlibs import cache_root

REPO = Path(__file__).resolve().parents[2]

SDIST = "llama-cpp-python-0.3.36.tar.gz"


@contextmanager
def redis_server(data: Path, password: str | None = None, users: dict[str, str] | None = None,
                 unix_socket: Path | None = None,
                 acl: dict[str, tuple[str, tuple[str, ...]]] | None = None) -> Iterator[str]:
    """redis-server on 127.0.0.1 at a free port, nothing persisted; its URL (without the password,
    if one is required) while it runs. users: ACL users (name -> password) allowed everything;
    acl: users allowed only what their rules say (name -> (password, rules such as "~*", "+get"));
    unix_socket: also listen there (mode 0700)."""
    server = shutil.which("redis-server")
    assert server, "redis-server is missing: scripts/ci-setup.sh installs it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(data), *(("--requirepass", password) if password else ()),
                             *(a for name, pw in (users or {}).items()
                               for a in ("--user", name, "on", f">{pw}", "~*", "&*", "+@all")),
                             *(a for name, (pw, rules) in (acl or {}).items()
                               for a in ("--user", name, "on", f">{pw}", *rules)),
                             *(("--unixsocket", str(unix_socket), "--unixsocketperm", "700") if unix_socket else ())],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                    c.sendall(b"PING\r\n")
                    if c.recv(64).startswith((b"+PONG", b"-NOAUTH")):   # up (and asking for the password)
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not answer PING"
            time.sleep(0.2)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def netns_works() -> bool:
    """Whether a new network namespace can be made here (`unshare --net`, what --network=none uses: root)."""
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


@dataclass(frozen=True)
class Machine:
    home: Path
    recipe: Path
    work: Path

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "ASSEMBLE_CACHE": str(self.home / ".cache" / "assemble"),
                "CCACHE_DIR": str(self.home / ".ccache"), "XDG_CACHE_HOME": str(self.home / ".cache")}


def machine(root: Path, name: str, recipe: str = "cpu", extra: str = "") -> Machine:
    """A fresh machine holding a copy of the shipped recipe, `extra` TOML appended to it."""
    home = root / name / "home"
    downloads = home / ".cache" / "assemble" / "downloads"
    downloads.mkdir(parents=True)
    cached = cache_root() / "cache" / "downloads" / SDIST     # where the tests' own builds keep it
    if cached.is_file():
        shutil.copy(cached, downloads / SDIST)
    checkout = root / name / "checkouts" / f"project-{name}"
    checkout.mkdir(parents=True)
    (checkout / f"{recipe}.toml").write_text((REPO / "recipes" / f"{recipe}.toml").read_text() + extra)
    return Machine(home, checkout / f"{recipe}.toml", checkout)


_WRITES = ("set", "setex", "psetex", "setnx", "mset", "msetnx", "getset", "append", "hset", "hmset", "rpush",
           "lpush", "sadd", "zadd", "expire", "pexpire", "del", "unlink", "rename")
_READS = ("get", "mget", "exists", "hget", "hgetall", "getex", "strlen", "getrange")


def redis_counts(url: str) -> dict[str, int]:
    """The server's own counts (INFO commandstats, DBSIZE): commands that change the store ("writes"),
    those that read it ("reads"), and its number of keys. url: redis://[PASSWORD@]127.0.0.1:PORT."""
    rest = url.removeprefix("redis://")
    password, _, hostport = rest.rpartition("@")
    host, _, port = hostport.partition(":")
    with socket.create_connection((host, int(port.split("/")[0])), timeout=10) as c:
        def command(*words: str) -> bytes:
            """One reply: a status or integer line, or a bulk string ($N, then N bytes)."""
            c.sendall(f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words))
            data = b""
            while b"\r\n" not in data:
                data += c.recv(65536)
            head, _, body = data.partition(b"\r\n")
            if not head.startswith(b"$"):
                return head
            while len(body) < int(head[1:]) + 2:
                body += c.recv(65536)
            return body[:int(head[1:])]
        if password:
            assert command("AUTH", password).startswith(b"+OK")
        stats = command("INFO", "commandstats").decode()
        keys = int(command("DBSIZE").decode().strip().lstrip(":"))
    calls = {m[0]: int(m[1]) for m in re.findall(r"cmdstat_([a-z]+):calls=(\d+)", stats)}
    return {"writes": sum(calls.get(n, 0) for n in _WRITES), "reads": sum(calls.get(n, 0) for n in _READS),
            "keys": keys}


def run_cli(*args: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """This checkout's CLI in a subprocess, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "builder", *args], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)


@compiles
def build_on(m: Machine, url: str, *args: str, env: dict[str, str] | None = None,
             cli: Callable[..., subprocess.CompletedProcess] = run_cli) -> tuple[float, dict, str]:
    """Build the recipe there through the remote cache: (seconds, the manifest's units[0].cache, stderr).
    cli: how the CLI is run (run_cli's signature)."""
    out = m.work / "out" / f"runtime-{m.recipe.stem}"
    start = time.monotonic()
    proc = cli("build", "--recipe", str(m.recipe), "--out", str(out), "--remote-cache", url, "--no-verify", *args,
                    cwd=m.work, env={**m.env, **(env or {})}, timeout=3600)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-4000:]
    (unit,) = json.loads((out / "manifest.json").read_text())["units"]
    return took, unit["cache"], proc.stderr
