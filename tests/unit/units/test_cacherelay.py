"""The relay that lets a networkless container unit reach a Redis compile cache, against a real
redis-server (Debian's, started per test on 127.0.0.1 with a password and a database number).

The container case is modelled by the kernel feature `--network=none` uses: a fresh network
namespace (`unshare --net`) with no interface but its own loopback. Real ccache runs in it: the
cache's TCP address is unreachable there, the relay's unix socket is not.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from builder.units.cacherelay import Endpoint, Relay, relayable
from builder.config import remotecache
from builder.config.remotecache import parse
from scripts.support.remotecache import netns_works, redis_server

PASSWORD = "s3cr:et/pw"


def _resp(*words: str) -> bytes:
    return f"*{len(words)}\r\n".encode() + b"".join(b"$%d\r\n%s\r\n" % (len(w), w.encode()) for w in words)


def _ask(path: Path, *words: str) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(_resp(*words))
        return s.recv(4096)


def _relay(url: str) -> Relay:
    return Relay(parse(url, "test"))


def test_urls_it_relays_and_how_it_reads_them():
    assert relayable(parse("redis://cache:6379", "t")) and relayable(parse("redis+unix:/run/redis.sock", "t"))
    assert not relayable(parse("http://cache/ccache", "t")) and not relayable(parse("s3://bucket", "t"))
    assert not relayable(None)
    e = Endpoint.of(parse("redis://user:p%40ss@cache.internal:7000/3", "t"))
    assert (e.address, e.username, e.password, e.db, e.family) == (("cache.internal", 7000), "user", "p@ss", 3,
                                                                    socket.AF_INET)
    assert "p@ss" not in repr(e)
    e = Endpoint.of(parse("redis://:pw@[::1]", "t"))
    assert (e.address, e.username, e.password, e.db, e.family) == (("::1", 6379), None, "pw", 0, socket.AF_INET6)
    e = Endpoint.of(parse("redis://pw@cache", "t"))            # ccache's form: a password, not a user name
    assert (e.username, e.password) == (None, "pw")
    e = Endpoint.of(parse("redis+unix:/run/redis.sock?db=2&password=x", "t"))
    assert (e.address, e.password, e.db, e.family) == ("/run/redis.sock", "x", 2, socket.AF_UNIX)


def test_the_relay_logs_in_and_selects_the_database_itself(tmp_path):
    with redis_server(tmp_path / "redis", password=PASSWORD) as url:
        host_url = url.replace("redis://", f"redis://:{PASSWORD.replace(':', '%3A').replace('/', '%2F')}@") + "/5"
        with _relay(host_url) as relay:
            assert relay.probe() is None
            told = relay.container_cache
            assert told.password is None and told.scheme == "redis+unix" and told.path == str(relay.socket_path)
            assert (relay.socket_path.parent.stat().st_mode & 0o777) == 0o700
            assert _ask(relay.socket_path, "SET", "k", "from-the-container") == b"+OK\r\n"
            assert _ask(relay.socket_path, "GET", "k") == b"$18\r\nfrom-the-container\r\n"
            folder = relay.folder
        assert not folder.exists()                                   # made by the relay, removed by it
        # the value went to database 5, the one the URL names (the client never said SELECT)
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as s:
            s.sendall(_resp("AUTH", PASSWORD) + _resp("SELECT", "5") + _resp("GET", "k"))
            data = b""
            while data.count(b"\r\n") < 4:
                data += s.recv(4096)
        assert data.endswith(b"from-the-container\r\n")


def test_a_wrong_password_or_a_dead_endpoint_fails_the_connection_not_the_relay(tmp_path):
    with redis_server(tmp_path / "redis", password=PASSWORD) as url:
        with _relay(url.replace("redis://", "redis://:wrong@")) as relay:
            assert "WRONGPASS" in (relay.probe() or "") or "invalid" in (relay.probe() or "")
            with socket.socket(socket.AF_UNIX) as s:     # the container's client sees a closed connection
                s.settimeout(10)
                s.connect(str(relay.socket_path))
                try:
                    s.sendall(_resp("PING"))
                    answer = s.recv(100)
                except (BrokenPipeError, ConnectionResetError):
                    answer = b""                         # closed before or after our PING arrived, unread
                assert answer == b""
            assert relay.failures == 1 and relay.last_error
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                        # nothing listens here any more
    with _relay(f"redis://127.0.0.1:{port}") as relay:
        assert "refused" in (relay.probe() or "").lower()


@pytest.mark.skipif(not netns_works(), reason="needs a new network namespace (`unshare --net`: root, as CI runs)")
def test_ccache_in_a_networkless_namespace_reaches_the_cache_only_through_the_relay(tmp_path):
    ccache, cc = shutil.which("ccache"), shutil.which("cc") or shutil.which("gcc")
    assert ccache and cc, "ccache and a C compiler are needed (scripts/ci-setup.sh installs ccache)"
    (tmp_path / "a.c").write_text("int answer(void) { return 42; }\n")

    def compile_in_netns(storage: str, ccache_dir: Path) -> str:
        env = {**os.environ, "CCACHE_DIR": str(ccache_dir), "CCACHE_REMOTE_STORAGE": storage,
               "CCACHE_STATSLOG": str(ccache_dir / "stats.log"), "CCACHE_BASEDIR": str(tmp_path)}
        proc = subprocess.run(["unshare", "--net", ccache, cc, "-c", "a.c", "-o", "a.o"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return (ccache_dir / "stats.log").read_text()

    with redis_server(tmp_path / "redis", password=PASSWORD) as url:
        direct = url.replace("redis://", f"redis://:{PASSWORD.replace(':', '%3A').replace('/', '%2F')}@")
        # the namespace has no route to the cache's TCP address: ccache's remote storage fails there
        assert "remote_storage_error" in compile_in_netns(direct, tmp_path / "cc0")
        with _relay(direct) as relay:
            told = remotecache.ccache_url(relay.container_cache)
            first = compile_in_netns(told, tmp_path / "cc1")
            assert "cache_miss" in first and "remote_storage_error" not in first
            second = compile_in_netns(told, tmp_path / "cc2")   # another, empty local cache
            assert "remote_storage_hit" in second, second
            assert relay.failures == 0


def test_a_deep_temporary_folder_does_not_break_the_socket(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)            # a build's TMPDIR sits this deep in its output's staging
    deep.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    with _relay("redis://127.0.0.1:1") as relay:
        assert len(str(relay.socket_path)) < 108 and relay.socket_path.is_socket()
