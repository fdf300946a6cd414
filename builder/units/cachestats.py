"""What one build's compiles found in the compiler cache: ccache's stats log of that build, or the
counters of the sccache server that served it alone (builder.units.sccacheserver).

The log (CCACHE_STATSLOG, one per build folder) names each compile and its counters; summed
here into hits, misses and remote hits, for the build's log line and the manifest
(units[].cache).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.config.remotecache import RemoteCache

STATS_LOG = "ccache-stats.log"       # in the build folder: ccache's per-compile counters for this build
STATS_FILE = "assemble-cache-stats.json"   # what the last build of the folder found, for the manifest


@dataclass(frozen=True)
class CacheStats:
    """What one build's compiles found in the cache (ccache's stats log of that build)."""
    launcher: str
    remote: str | None               # the store, redacted
    compiles: int                    # cacheable compiler calls
    hits: int
    remote_hits: int
    misses: int

    @property
    def hit_rate(self) -> float:
        return self.hits / self.compiles if self.compiles else 0.0

    def line(self) -> str:
        if not self.compiles:
            return f"{self.launcher}: no cacheable compile ran"
        remote = f", {self.remote_hits} from the remote cache" if self.remote else ""
        return (f"{self.launcher}: {self.compiles} compiles, {self.hits} hits ({self.hit_rate:.1%}){remote}, "
                f"{self.misses} compiled")

    def as_dict(self) -> dict[str, Any]:
        return {"launcher": self.launcher, "remote": self.remote, "compiles": self.compiles, "hits": self.hits,
                "remote_hits": self.remote_hits, "misses": self.misses, "hit_rate": round(self.hit_rate, 4)}


def read_stats_log(path: Path, remote: RemoteCache | None) -> CacheStats | None:
    """Count ccache's per-compile lines ("# file" then its counters); None when there is no log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    counts = Counter(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))
    hits = counts["direct_cache_hit"] + counts["preprocessed_cache_hit"]
    misses = counts["cache_miss"]
    return CacheStats("ccache", str(remote) if remote else None, hits + misses, hits,
                      counts["remote_storage_hit"], misses)


def from_sccache(stats_json: dict[str, Any], remote: RemoteCache | None) -> CacheStats:
    """sccache's `--show-stats --stats-format=json` of a server that served this build alone. With a
    remote store sccache keeps no local tier: every hit came from the store."""
    stats = stats_json.get("stats", {})
    hits = sum(stats.get("cache_hits", {}).get("counts", {}).values())
    misses = sum(stats.get("cache_misses", {}).get("counts", {}).values())
    return CacheStats("sccache", str(remote) if remote else None, hits + misses, hits,
                      hits if remote else 0, misses)
