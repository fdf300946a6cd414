"""The one door a networkless container unit has: a unix socket that relays to the shared Redis cache.

Container units run with `--network=none`, so they reach nothing by TCP. For a Redis remote cache
(redis:// or redis+unix:) the build opens a relay in a fresh private folder: each connection the
container's ccache makes to `redis+unix:<folder>/redis.sock` is joined to the cache's own endpoint,
and to nothing else. The relay logs in (AUTH pw, or AUTH user pw) and picks the database (SELECT)
itself before it joins the two ends, with the same parsed URL (config.remotecache.RemoteCache) the
host's launchers are told, so the password never enters the container's environment or the
engine's command line.

Other stores (http:, and sccache's s3:/gs:/gha:) are not relayed: the container's ccache cannot
speak them over a unix socket, and the unit keeps its local ccache (pipeline says so).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from builder.config import remotecache
from builder.config.remotecache import RemoteCache
from builder.paths import socket_parent

SOCKET_NAME = "redis.sock"
RELAYED_SCHEMES = remotecache.REDIS   # the schemes a unix-socket relay can carry
CONNECT_TIMEOUT = 5.0            # an endpoint that does not answer fails this connection, not the build


def relayable(cache: RemoteCache | None) -> bool:
    """Whether a container unit can reach this store through the relay."""
    return cache is not None and cache.scheme in RELAYED_SCHEMES


@dataclass(frozen=True)
class Endpoint:
    """Where the Redis cache listens and how to log in: read from the parsed URL (RemoteCache), the
    same value the host's launchers are told."""
    family: int                      # socket.AF_INET / AF_INET6 / AF_UNIX
    address: tuple[str, int] | str
    username: str | None
    password: str | None = field(repr=False)
    db: int

    @classmethod
    def of(cls, cache: RemoteCache) -> Endpoint:
        if cache.scheme == "redis+unix":
            return cls(socket.AF_UNIX, cache.path, cache.user, cache.password, cache.db)
        host, port = cache.host or "localhost", cache.port or remotecache.DEFAULT_REDIS_PORT
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return cls(family, (host, port), cache.user, cache.password, cache.db)

    def connect(self) -> socket.socket:
        """A logged-in connection with the database selected; OSError when the cache refuses it."""
        s = socket.socket(self.family, socket.SOCK_STREAM)
        try:
            s.settimeout(CONNECT_TIMEOUT)
            s.connect(self.address)
            if self.password is not None:       # AUTH pw, or AUTH user pw (Redis >= 6 users)
                _command(s, "AUTH", *((self.username,) if self.username is not None else ()), self.password)
            if self.db:
                _command(s, "SELECT", str(self.db))
            s.settimeout(None)
            return s
        except BaseException:
            s.close()
            raise


def _command(s: socket.socket, *words: str) -> None:
    """Send one RESP command and require a simple "+..." reply (the handshake only)."""
    data = f"*{len(words)}\r\n".encode() + b"".join(
        b"$%d\r\n%s\r\n" % (len(w.encode()), w.encode()) for w in words)
    s.sendall(data)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = s.recv(512)
        if not chunk:
            raise OSError(f"the cache closed the connection after {words[0]}")
        reply += chunk
    if not reply.startswith(b"+"):
        raise OSError(f"the cache refused {words[0]}: {reply.decode(errors='replace').strip()}")


class Relay:
    """Listen on <fresh folder>/redis.sock while the unit builds; join each connection to the cache.

    with Relay(cache) as relay:  mount relay.folder, tell the container's launcher relay.container_cache
    The folder is made here (mkdtemp, mode 0700) and removed on exit: nothing else is touched.
    """

    def __init__(self, cache: RemoteCache):
        self.cache = cache
        self.endpoint = Endpoint.of(cache)
        self.folder: Path | None = None
        self.failures = 0                     # connections the cache did not take
        self.last_error = ""
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    @property
    def socket_path(self) -> Path:
        assert self.folder is not None, "the relay is not open"
        return self.folder / SOCKET_NAME

    @property
    def container_cache(self) -> RemoteCache:
        """The cache as the container sees it: the socket, no password (the relay logs in)."""
        return RemoteCache("redis+unix", path=str(self.socket_path), given=f"redis+unix:{self.socket_path}",
                           read_only=self.cache.read_only)   # a tag build reads through the relay, writes nothing

    def probe(self) -> str | None:
        """None when the cache takes a logged-in connection now; else why not (one line)."""
        try:
            self.endpoint.connect().close()
            return None
        except OSError as e:
            return str(e) or type(e).__name__

    def __enter__(self) -> Relay:
        # a short path, not the build folder: a unix socket path must stay under 108 bytes
        self.folder = Path(tempfile.mkdtemp(prefix="assemble-cache-relay-", dir=socket_parent()))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        listener.listen(64)
        self._listener = listener
        accept = threading.Thread(target=self._accept, name="cache-relay", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return                         # closed: the unit finished
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        try:
            upstream = self.endpoint.connect()
        except OSError as e:
            self.failures += 1
            self.last_error = str(e) or type(e).__name__
            client.close()                     # ccache then builds without the remote cache
            return
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        client.close()
        upstream.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until src ends, then end dst's writing side."""
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
