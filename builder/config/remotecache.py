"""A compile cache shared across machines: the `--remote-cache URL`, read once into a RemoteCache,
and told to each launcher in the words it reads.

What each launcher reads (measured with ccache 4.7.5 and sccache 0.16.0 against a Redis that asks
for a password; docs/lab/2026-11-29-release.md has the matrix):
  ccache   CCACHE_REMOTE_STORAGE=redis://[[USER:]PASSWORD@]HOST[:PORT][/DB]
           or redis+unix:PATH[?db=DB] / redis+unix://[[USER:]PASSWORD@]localhost/PATH[?db=DB], http://...
           It splits the (percent-decoded) user info at its first ':'. `PASSWORD@` is a password;
           `:PASSWORD@` is NO password (an empty user name, so no AUTH is sent and nothing is stored);
           a password alone that holds a ':' must be written `default:PASSWORD@` (Redis >= 6's user of
           `requirepass`). `?password=` is not read.
  sccache  SCCACHE_REDIS_ENDPOINT=redis://HOST[:PORT] or redis+unix://localhost/PATH, with
           SCCACHE_REDIS_USERNAME, SCCACHE_REDIS_PASSWORD and SCCACHE_REDIS_DB beside it: the user info
           and the /DB of an endpoint are not read (no AUTH: its server never starts), and the password
           stays out of `sccache --show-stats` (which prints the endpoint). s3://bucket[/prefix],
           gs://bucket[/prefix], gha -> SCCACHE_BUCKET/..., SCCACHE_GCS_BUCKET/..., SCCACHE_GHA_ENABLED.

What assemble accepts: every credential form of either launcher (and of redis-py):
  redis://PASSWORD@host, redis://:PASSWORD@host, redis://USER:PASSWORD@host, and on either scheme
  ?password= (or ?pass=) and ?user= (or ?username=); redis+unix:/path, redis+unix:///path and
  redis+unix://[[USER:]PASSWORD@]localhost/path; the database as /DB (redis://) or ?db=.
  Percent-encode '/', '?', '#', '@', ':' and spaces in a user name or password.
`redis://X@host` is read as ccache reads it, a password: Redis logs in with a password (AUTH pw) or
a user and a password (AUTH user pw), never with a user name alone, so reading X as a user name (as
redis-py does) would mean no login at all, and a cache that asks for a password would store nothing.

Hits across machines need the same relative paths: every build folder and source tree sits under
the assemble cache, which is the base directory (CCACHE_BASEDIR, SCCACHE_BASEDIRS), so two
machines with other HOMEs or checkout paths compute the same keys.

The URL may carry secrets: it is never printed, logged or recorded but through `redacted`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote

from builder.errors import AssembleError

T = TypeVar("T")

ENV = "ASSEMBLE_REMOTE_CACHE"        # the environment's way to set it (--remote-cache wins)
# Read the shared cache and never write it (a release built on a tag: whoever can write the cache can
# put objects into what the tag ships, so only trusted default-branch builds write). ccache is told
# with its remote storage's `read-only` attribute; sccache is refused, having no read-only mode for
# every backend it takes here.
READ_ONLY_ENV = "ASSEMBLE_REMOTE_CACHE_READ_ONLY"
READ_ONLY_VALUES = {"true": True, "1": True, "false": False, "0": False, "": False}
SCHEMES = {"ccache": ("redis", "redis+unix", "http"), "sccache": ("redis", "redis+unix", "s3", "gs", "gha")}
KNOWN = tuple(sorted({s for schemes in SCHEMES.values() for s in schemes}))
REDIS = ("redis", "redis+unix")
DEFAULT_REDIS_PORT = 6379
DEFAULT_USER = "default"             # the Redis (>= 6) user that `requirepass` sets the password of
HIDDEN = "***"
SHOWN_QUERY = ("db",)                # the only query value shown; every other one may be a secret
_QUERY_NAMES = {"db": "db", "password": "password", "pass": "password", "user": "user", "username": "user"}
_FORM = "redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] or redis+unix:/PATH[?db=DB&password=...]"


def redacted(text: str) -> str:
    """`text` (a URL, well formed or not) with every secret replaced by ***: the user info's password
    (all of it when it has no ':', as `PASSWORD@` is a password), whatever characters it holds, a port
    that is no number, everything after a '#', and every query value but the database. Errors, `show`, --json, logs and the manifest print URLs only
    through this."""
    m = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:(//)?", text)
    start = m.end() if m else 0
    hide = [False] * len(text)
    at = text.rfind("@", start)
    if at >= 0:                                       # the last '@': a password may hold '/', '?' or '@'
        user, colon, _ = text[start:at].partition(":")
        for i in range(start + (len(user) + 1 if colon else 0), at):
            hide[i] = True
    fragment = text.find("#", start)
    if fragment >= 0:                                 # a fragment, or the rest of an unencoded '#' password
        for i in range(fragment + 1, len(text)):
            hide[i] = True
        text_end = fragment
    else:
        text_end = len(text)
    host = at + 1 if at >= 0 else start               # HOST[:PORT]: a ':' not followed by a port may be a password
    host_end = min([i for i in (text.find(c, host) for c in "/?#") if i >= 0] + [text_end])
    port = text.rfind(":", host, host_end)
    if port >= 0 and "]" not in text[port:host_end] and not text[port + 1:host_end].isdigit():
        for i in range(port + 1, host_end):
            hide[i] = True
    query = text.find("?", start, text_end)
    if query >= 0:
        pos = query + 1
        for part in text[query + 1:text_end].split("&"):
            name, eq, value = part.partition("=")
            shown = eq and name.lower() in SHOWN_QUERY and value.isdigit()
            if not shown:                             # a bare word may be the rest of a password
                for i in range(pos + (len(name) + 1 if eq else 0), pos + len(part)):
                    hide[i] = True
            pos += len(part) + 1
    out, i = [], 0
    while i < len(text):
        if hide[i]:
            while i < len(text) and hide[i]:
                i += 1
            out.append(HIDDEN)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class RemoteCache:
    """A shared compile cache, read once from its URL (`parse`): what every launcher is told and the
    relay logs in with. Secrets stay out of repr(); str() is the URL as given, redacted."""
    scheme: str                                       # redis | redis+unix | http | s3 | gs | gha
    host: str = ""                                    # redis/http: name or address (IPv6 unbracketed); s3/gs: bucket
    port: int | None = None
    path: str = ""                                    # redis+unix: the socket; http: the path; s3/gs: the key prefix
    db: int = 0
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    given: str = field(default="", repr=False, compare=False)     # as written: shown only redacted
    read_only: bool = False                           # read hits, store nothing (READ_ONLY_ENV)

    def __str__(self) -> str:
        return redacted(self.given or self.scheme + ":") + (" (read-only)" if self.read_only else "")

    def hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host + (f":{self.port}" if self.port is not None else "")


def parse(url: str, where: str) -> RemoteCache:
    """The URL as a RemoteCache; one line (AssembleError, exit 2) for anything no launcher can use,
    never a traceback. Messages show the URL only redacted and never echo a part of it."""
    def refuse(why: str, fix: str = f"write it as {_FORM}; percent-encode '/', '?', '#', '@', ':' and "
                                      "spaces in a user name or password (%2F %3F %23 %40 %3A %20)") -> AssembleError:
        return AssembleError(f"{redacted(url)!r}: {why}", where=where, fix=fix)

    if url in ("gha", "gha:"):
        return RemoteCache("gha", given=url)
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", url, re.S)
    scheme = m.group(1).lower() if m else ""
    if scheme not in KNOWN:
        raise AssembleError(f"{redacted(url)!r} is not a compile cache URL", where=where,
                            fix=f"use one of {', '.join(k + ':' for k in KNOWN)} (e.g. redis://cache.internal:6379)")
    assert m is not None
    rest = m.group(2)
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise refuse("it holds a space or a control character")
    if "#" in rest:
        raise refuse("it holds a '#' (a fragment, or an unencoded '#' in a password)")
    rest, _, query = rest.partition("?")
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        path = slash + path
    elif scheme == "redis+unix":
        authority, path = None, rest
    else:
        raise refuse(f"a {scheme}: URL starts with {scheme}://")
    if "@" in path or ("@" in query and "@" not in (authority or "")):
        raise refuse("an '@' after the host (an unencoded '/', '?' or '#' in the password?)")
    user, password, host, port = _authority(authority, scheme, refuse)
    params = _query(query, scheme, refuse)
    password = _one(password, params.get("password"), "password", refuse)
    user = _one(user, params.get("user"), "user name", refuse)
    if user is not None and password is None:
        raise refuse("a user name with no password: a cache logs in with a password, or a user and a password")
    if scheme == "http" and password is not None and user is None:
        raise refuse("an http: cache logs in with USER:PASSWORD (basic authentication)")
    if scheme == "redis":
        if path.strip("/") and not re.fullmatch(r"/[0-9]{1,9}/?", path):
            raise refuse("its database (the path) is not a number")
        db = _one(int(path.strip("/")) if path.strip("/") else None, params.get("db"), "database", refuse)
        return RemoteCache("redis", host, port, "", db or 0, user, password, url)
    if scheme == "redis+unix":
        path = unquote(path)
        if not path.startswith("/") or path.endswith("/"):
            raise refuse("a redis+unix: URL names the socket by its absolute path",
                         fix="write it as redis+unix:/run/redis.sock or redis+unix://PASSWORD@localhost/run/redis.sock")
        return RemoteCache("redis+unix", "", None, path, params.get("db") or 0, user, password, url)
    if scheme == "http":
        return RemoteCache("http", host, port, unquote(path), 0, user, password, url)
    return RemoteCache(scheme, host, None, path.strip("/"), given=url)       # s3, gs


def _authority(authority: str | None, scheme: str, refuse: Callable[..., AssembleError]) -> tuple[str | None, str | None, str, int | None]:
    """(user, password, host, port) of `[userinfo@]host[:port]`; host "" for redis+unix."""
    if authority is None:
        return None, None, "", None
    info, at, hostport = authority.rpartition("@")
    user = password = None
    if at:
        if scheme in ("s3", "gs"):
            raise refuse("credentials in the URL", fix="sccache reads them from AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY (S3) or SCCACHE_GCS_KEY_PATH (GCS); give the URL without them")
        left, colon, right = info.partition(":")
        if not colon:
            password = unquote(left) or None             # PASSWORD@ is a password (ccache's reading)
        else:
            user, password = unquote(left) or None, unquote(right) or None
    if scheme == "redis+unix":
        if hostport not in ("", "localhost"):
            raise refuse("a redis+unix: URL names no host but localhost",
                         fix="write it as redis+unix:/run/redis.sock or redis+unix://PASSWORD@localhost/run/redis.sock")
        return user, password, "", None
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise refuse("its IPv6 address has no closing ']'")
        host, after = hostport[1:end], hostport[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise refuse("the address in [...] is not an IPv6 address") from None
        if after and not after.startswith(":"):
            raise refuse("something other than :PORT follows the IPv6 address")
        port_text = after[1:] if after else None
    else:
        if hostport.count(":") > 1:
            raise refuse("an IPv6 address goes in brackets, e.g. redis://[::1]:6379")
        host, colon, port_text = hostport.partition(":")
        port_text = port_text if colon else None
        if not host:
            raise refuse("it names no host" if scheme not in ("s3", "gs") else "it names no bucket")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", host):
            raise refuse("its host is not a host name or address")
    if port_text is not None:
        if scheme in ("s3", "gs"):
            raise refuse("a bucket has no port")
        if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 0 < int(port_text) < 65536:
            raise refuse("its port is not a number from 1 to 65535")
    return user, password, host, int(port_text) if port_text is not None else None


def _query(query: str, scheme: str, refuse: Callable[..., AssembleError]) -> dict[str, Any]:
    """db, password and user from a Redis URL's query (redis-py's and the redis crate's names)."""
    if not query:
        return {}
    if scheme not in REDIS:
        raise refuse(f"a {scheme}: URL takes no query")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise refuse("its query is not name=value pairs") from None
    out: dict[str, Any] = {}
    for name, value in pairs:
        key = _QUERY_NAMES.get(name.lower())
        if key is None:
            raise refuse(f"a query parameter other than {', '.join(_QUERY_NAMES)}")
        if key in out:
            raise refuse(f"its query gives the {key} twice")
        if key == "db":
            if not re.fullmatch(r"[0-9]{1,9}", value):
                raise refuse("its database (?db=) is not a number")
            out[key] = int(value)
        else:
            out[key] = value or None
    return out


def _one(a: T | None, b: T | None, what: str, refuse: Callable[..., AssembleError]) -> T | None:
    if a is not None and b is not None:
        raise refuse(f"it gives the {what} twice (in the URL and in its query)")
    return a if a is not None else b


def check(cache: RemoteCache, launcher: str, where: str) -> None:
    """Refuse (one line, exit 2) a cache the launcher cannot use, before anything is built."""
    if launcher not in SCHEMES:
        raise AssembleError(f"a remote cache needs a compiler launcher, and this build has {launcher or 'none'}",
                            where=where, fix="install ccache (>= 4.4) or sccache, or drop --remote-cache")
    if cache.scheme not in SCHEMES[launcher]:
        raise AssembleError(f"{launcher} cannot use {str(cache)!r} as a remote cache", where=where,
                            fix=f"{launcher} takes {', '.join(s + ':' for s in SCHEMES[launcher])} URLs"
                                + ("; or use --launcher sccache" if launcher == "ccache" else ""))
    if cache.read_only and launcher != "ccache":
        raise AssembleError(f"the remote cache is read-only and {launcher} is not told so here: the build "
                            "would write the shared cache", where=where,
                            fix="use --launcher ccache (>= 4.4), or drop the remote cache for this build")


def read_only(value: str, where: str) -> bool:
    """READ_ONLY_ENV's value: true/1 or false/0 (empty: false); anything else is one line."""
    if value.strip().lower() not in READ_ONLY_VALUES:
        raise AssembleError(f"{value!r} is not true or false", where=where,
                            fix=f"set {READ_ONLY_ENV} to true (read the shared cache only) or false")
    return READ_ONLY_VALUES[value.strip().lower()]


def ccache_url(cache: RemoteCache) -> str:
    """CCACHE_REMOTE_STORAGE for `cache`, in the form ccache 4.x reads (see the module's text)."""
    def q(s: str) -> str:
        return quote(s, safe="")                       # ' ', '|', '*' too: ccache splits its setting on them
    creds = ""
    if cache.password is not None:
        user = cache.user if cache.user is not None else (DEFAULT_USER if ":" in cache.password else None)
        creds = (f"{q(user)}:" if user is not None else "") + f"{q(cache.password)}@"
    # ccache's attributes follow the URL after '|' (the URL's own '|' is percent-encoded above)
    attrs = "|read-only" if cache.read_only else ""
    if cache.scheme == "redis":
        return f"redis://{creds}{cache.hostport()}" + (f"/{cache.db}" if cache.db else "") + attrs
    if cache.scheme == "redis+unix":
        db = f"?db={cache.db}" if cache.db else ""
        path = quote(cache.path, safe="/")
        return (f"redis+unix://{creds}localhost{path}{db}" if creds else f"redis+unix:{path}{db}") + attrs
    if cache.scheme == "http":
        return f"http://{creds}{cache.hostport()}{quote(cache.path, safe='/')}" + attrs
    raise ValueError(f"ccache cannot use {cache.scheme}: (remotecache.check refuses it first)")


def remote_env(cache: RemoteCache, launcher: str) -> dict[str, str]:
    """The variables that point `launcher` at `cache`, in its own words."""
    if launcher == "ccache":
        return {"CCACHE_REMOTE_STORAGE": ccache_url(cache)}
    if launcher != "sccache":
        return {}
    if cache.scheme in REDIS:
        env = {"SCCACHE_REDIS_ENDPOINT": f"redis://{cache.hostport()}" if cache.scheme == "redis"
               else f"redis+unix://localhost{quote(cache.path, safe='/')}"}
        if cache.user is not None:
            env["SCCACHE_REDIS_USERNAME"] = cache.user
        if cache.password is not None:
            env["SCCACHE_REDIS_PASSWORD"] = cache.password
        if cache.db:
            env["SCCACHE_REDIS_DB"] = str(cache.db)
        return env
    if cache.scheme in ("s3", "gs"):
        bucket, prefix = ("SCCACHE_BUCKET", "SCCACHE_S3_KEY_PREFIX") if cache.scheme == "s3" \
            else ("SCCACHE_GCS_BUCKET", "SCCACHE_GCS_KEY_PREFIX")
        return {bucket: cache.host, **({prefix: cache.path} if cache.path else {})}
    if cache.scheme == "gha":
        return {"SCCACHE_GHA_ENABLED": "true"}
    return {}


def launcher_env(cache: RemoteCache | None, launcher: str, base_dir: Path) -> dict[str, str]:
    """The variables that point `launcher` at the shared store with relative paths under base_dir."""
    base = {"ccache": {"CCACHE_BASEDIR": str(base_dir)}, "sccache": {"SCCACHE_BASEDIRS": str(base_dir)}}
    if launcher not in base:
        return {}
    return {**base[launcher], **(remote_env(cache, launcher) if cache else {})}
