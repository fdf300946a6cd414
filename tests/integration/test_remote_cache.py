"""A compile cache shared across machines: the cpu recipe built on "machine A", then on "machine B"
with every local cache wiped, through a real Redis server (Debian's redis-server on 127.0.0.1).

The machines differ as two CI runners do (tests/support/remotecache.py): another HOME, so another
assemble cache and ccache folder, another checkout path of the recipe, another working directory and
--out. B must take its objects from the remote cache (>= 95% of its compiles are remote hits, as its
manifest records them). The times are printed, not asserted: scripts/bench-remote-cache.py measures
them (docs/release.md has the numbers).
"""

from __future__ import annotations

import shutil

import pytest

from tests.support.remotecache import build_on, machine, redis_server

pytestmark = pytest.mark.slow


def test_machine_b_takes_its_objects_from_the_cache_machine_a_filled(tmp_path):
    with redis_server(tmp_path / "redis") as url:
        a, b = machine(tmp_path, "a"), machine(tmp_path, "b")
        cold, stats_a, log_a = build_on(a, url)
        assert "remote compile cache: redis://127.0.0.1:" in log_a and "compile cache of unit main: ccache:" in log_a
        assert stats_a["remote"] == url and stats_a["compiles"] > 100
        assert stats_a["misses"] > 0.9 * stats_a["compiles"], stats_a          # A really compiled
        shutil.rmtree(a.home)                                                  # nothing local survives A
        warm, stats_b, _ = build_on(b, url)
    print(f"\nmachine A (cold): {cold:.0f} s, {stats_a}\nmachine B (remote): {warm:.0f} s, {stats_b}")
    assert stats_b["compiles"] == stats_a["compiles"]
    assert stats_b["remote_hits"] >= 0.95 * stats_b["compiles"], stats_b
    assert stats_b["hit_rate"] >= 0.95, stats_b
