"""A compile cache shared across machines: the cpu recipe built on "machine A", then on "machine B"
with every local cache wiped, through a real Redis server (Debian's redis-server on 127.0.0.1).

The two machines differ as two CI runners do: another HOME (so another assemble cache and
ccache folder), another checkout path of the recipe, another working directory and --out. B must
take its objects from the remote cache: goal >= 95% hits and B <= 20% of A's time (issue 19).
The measured numbers are printed (pytest -s) and asserted; the hit counts come from the
manifest each build writes (units[].cache), which is what this feature promises to record.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.common import REPO, TEST_CACHE, assemble

pytestmark = pytest.mark.slow


@pytest.fixture
def redis(tmp_path):
    server = shutil.which("redis-server")
    assert server, "redis-server is missing: scripts/ci-setup.sh installs it"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = tmp_path / "redis"
    data.mkdir()
    proc = subprocess.Popen([server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                             "--dir", str(data), "--protected-mode", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"PING\r\n")
                if c.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("redis-server did not answer PING")
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _machine(root: Path, name: str) -> dict:
    """A fresh HOME with nothing cached but the sdist download (a runner's pip/HTTP cache would have it)."""
    home = root / name / "home"
    cache = home / ".cache" / "assemble"
    (cache / "downloads").mkdir(parents=True)
    sdist = TEST_CACHE / "cache" / "downloads" / "llama-cpp-python-0.3.36.tar.gz"
    if sdist.is_file():
        shutil.copy(sdist, cache / "downloads" / sdist.name)
    checkout = root / name / "checkouts" / f"project-{name}"
    checkout.mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "cpu.toml", checkout / "cpu.toml")
    return {"home": home, "cache": cache, "recipe": checkout / "cpu.toml", "work": checkout,
            "env": {"HOME": str(home), "ASSEMBLE_CACHE": str(cache), "CCACHE_DIR": str(home / ".ccache"),
                    "XDG_CACHE_HOME": str(home / ".cache")}}


def _build(m: dict, url: str) -> tuple[float, dict]:
    out = m["work"] / "out" / "runtime-cpu"
    start = time.monotonic()
    proc = assemble("build", "--recipe", str(m["recipe"]), "--out", str(out), "--remote-cache", url,
                    "--no-verify", cwd=m["work"], env=m["env"], timeout=3600)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "remote compile cache: redis://127.0.0.1:" in proc.stderr
    (unit,) = json.loads((out / "manifest.json").read_text())["units"]
    assert unit["cache"] is not None, "the manifest must record the build's cache counters"
    assert f"compile cache of unit {unit['name']}: ccache:" in proc.stderr
    return took, unit["cache"]


def test_machine_b_compiles_almost_nothing_after_machine_a(redis, tmp_path):
    a, b = _machine(tmp_path, "a"), _machine(tmp_path, "b")
    cold, stats_a = _build(a, redis)
    assert stats_a["remote"] == redis and stats_a["compiles"] > 100
    assert stats_a["misses"] > 0.9 * stats_a["compiles"], stats_a          # A really compiled
    shutil.rmtree(a["home"])                                               # nothing local survives A
    warm, stats_b = _build(b, redis)
    print(f"\nmachine A (cold): {cold:.0f} s, {stats_a}\nmachine B (remote hits): {warm:.0f} s, {stats_b}")
    assert stats_b["compiles"] == stats_a["compiles"]
    assert stats_b["remote_hits"] >= 0.95 * stats_b["compiles"], stats_b
    assert stats_b["hit_rate"] >= 0.95, stats_b
    assert warm <= 0.20 * cold, f"B took {warm:.0f} s, A {cold:.0f} s"
