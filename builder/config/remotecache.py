"""A compile cache shared across machines: what `--remote-cache URL` means to each launcher,
and what a build's cache did (hits, misses, from where).

One URL names the shared store; each launcher is told in its own words:
  ccache   redis://[[user]:password@]host[:port][/db], redis+unix:/path, http://host/path
           -> CCACHE_REMOTE_STORAGE (ccache >= 4.4)
  sccache  redis://..., s3://bucket[/prefix], gs://bucket[/prefix], gha:
           -> SCCACHE_REDIS_ENDPOINT, SCCACHE_BUCKET/SCCACHE_S3_KEY_PREFIX, SCCACHE_GCS_BUCKET/
              SCCACHE_GCS_KEY_PREFIX, SCCACHE_GHA_ENABLED
Hits across machines need the same relative paths: every build folder and source tree sits under
the assemble cache, which is the base directory (CCACHE_BASEDIR, SCCACHE_BASEDIRS), so two
machines with other HOMEs or checkout paths compute the same keys.

The URL may carry a password: it is never logged or recorded as given (`redacted`).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from builder.errors import AssembleError

ENV = "ASSEMBLE_REMOTE_CACHE"        # the environment's way to set it (--remote-cache wins)
SCHEMES = {"ccache": ("redis", "redis+unix", "http"), "sccache": ("redis", "s3", "gs", "gha")}


def redacted(url: str) -> str:
    """The URL without its password: redis://:secret@host -> redis://:***@host."""
    return re.sub(r"^([a-z0-9+.-]+://[^/@:]*:)[^/@]*@", r"\1***@", url, flags=re.I)


def _scheme(url: str) -> str:
    return "gha" if url in ("gha", "gha:") else urlsplit(url).scheme.lower()


def redis_db(url: str) -> int:
    """The database a redis:// or redis+unix: URL selects (0 when it names none); ValueError when its
    port or database is not a number."""
    parts = urlsplit(url)
    db = parse_qs(parts.query).get("db", ["0"])[0]
    if parts.scheme.lower() == "redis":
        parts.port                                   # raises for a port that is not a number
        db = parts.path.strip("/") or db
    return int(db)


def check_known(url: str, where: str) -> None:
    """Refuse a URL no launcher can use, when the option is read (before any fetch)."""
    known = sorted({s for schemes in SCHEMES.values() for s in schemes})
    if _scheme(url) not in known:
        raise AssembleError(f"{redacted(url)!r} is not a compile cache URL", where=where,
                            fix=f"use one of {', '.join(k + ':' for k in known)} (e.g. redis://cache.internal:6379)")
    if _scheme(url) in ("redis", "redis+unix"):
        try:
            redis_db(url)
        except ValueError:
            raise AssembleError(f"{redacted(url)!r}: its port or database is not a number", where=where,
                                fix="write it as redis://[[user]:password@]host[:port][/db], e.g. "
                                    "redis://cache.internal:6379/0") from None


def check(url: str, launcher: str, where: str) -> None:
    """Refuse (one line, exit 2) a URL the launcher cannot use, before anything is built."""
    scheme = _scheme(url)
    if launcher not in SCHEMES:
        raise AssembleError(f"a remote cache needs a compiler launcher, and this build has {launcher or 'none'}",
                            where=where, fix="install ccache (>= 4.4) or sccache, or drop --remote-cache")
    if scheme not in SCHEMES[launcher]:
        raise AssembleError(f"{launcher} cannot use {redacted(url)!r} as a remote cache", where=where,
                            fix=f"{launcher} takes {', '.join(s + ':' for s in SCHEMES[launcher])} URLs"
                                + ("; or use --launcher sccache" if launcher == "ccache" else ""))


def launcher_env(url: str | None, launcher: str, base_dir: Path) -> dict[str, str]:
    """The variables that point `launcher` at the shared store with relative paths under base_dir."""
    if launcher == "ccache":
        env = {"CCACHE_BASEDIR": str(base_dir)}
        if url:
            env["CCACHE_REMOTE_STORAGE"] = url
        return env
    if launcher == "sccache":
        env = {"SCCACHE_BASEDIRS": str(base_dir)}
        if not url:
            return env
        scheme, parts = _scheme(url), urlsplit(url)
        if scheme == "redis":
            env["SCCACHE_REDIS_ENDPOINT"] = url
        elif scheme == "s3":
            env["SCCACHE_BUCKET"] = parts.netloc
            if parts.path.strip("/"):
                env["SCCACHE_S3_KEY_PREFIX"] = parts.path.strip("/")
        elif scheme == "gs":
            env["SCCACHE_GCS_BUCKET"] = parts.netloc
            if parts.path.strip("/"):
                env["SCCACHE_GCS_KEY_PREFIX"] = parts.path.strip("/")
        elif scheme == "gha":
            env["SCCACHE_GHA_ENABLED"] = "true"
        return env
    return {}
