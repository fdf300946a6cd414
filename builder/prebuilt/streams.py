"""The uncompressed bytes of a release archive, or of a .deb's data.tar, read once front to back.

A .deb's data.tar is read where it lies in the .deb (no copy out of the ar container), and
decompressed the way dpkg-deb does it: by the xz, zstd, gzip or bzip2 program in a pipe when it is
installed, so that decompression runs on another core beside the tar reader; in process otherwise
(Python's lzma, gzip, bz2 and the zstandard module: the same libraries, on one core).
"""

from __future__ import annotations

import bz2
import contextlib
import fcntl
import gzip
import io
import lzma
import os
import shutil
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, cast

from builder.source.archive import ArchiveRefused

if TYPE_CHECKING:
    from typing_extensions import Buffer

# codec -> (program, its arguments to write the decompressed stream of stdin to stdout)
PROGRAMS = {"xz": ("xz", "-dc", "-T0"), "zst": ("zstd", "-dcq"), "gz": ("gzip", "-dc"), "bz2": ("bzip2", "-dc")}
NAMES = {"xz": "xz", "zst": "zstd", "gz": "gzip", "bz2": "bzip2"}
USE_PROGRAMS = True            # tests turn it off to prove the in-process readers
_CHUNK = 1 << 20


class _Window(io.RawIOBase):
    """length bytes of a file from offset, read with pread (the .deb's data.tar member)."""

    def __init__(self, fd: int, offset: int, length: int):
        self._fd, self._pos, self._end = fd, offset, offset + length

    def readable(self) -> bool:
        return True

    def readinto(self, b: Buffer) -> int:
        view = memoryview(b).cast("B")
        n = min(len(view), self._end - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._pos)
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)


@contextlib.contextmanager
def opened(path: Path, offset: int, length: int, codec: str) -> Iterator[BinaryIO]:
    """The uncompressed stream of path[offset:offset+length], compressed with codec ("" for none);
    a stream the codec cannot read is ArchiveRefused ("unreadable xz stream (...)")."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        program = shutil.which(PROGRAMS[codec][0]) if codec and USE_PROGRAMS else None
        if program:
            with _piped(program, fd, offset, length, codec) as stream:
                yield stream
        else:
            with _in_process(fd, offset, length, codec) as stream:
                yield stream
    finally:
        os.close(fd)


@contextlib.contextmanager
def _in_process(fd: int, offset: int, length: int, codec: str) -> Iterator[BinaryIO]:
    raw = io.BufferedReader(_Window(fd, offset, length), _CHUNK)
    errors: tuple[type[BaseException], ...] = (lzma.LZMAError, zlib.error, EOFError, OSError)
    stream: io.BufferedIOBase
    if codec == "zst":
        import zstandard
        errors += (zstandard.ZstdError,)
        stream = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True), _CHUNK)
    elif codec == "xz":
        stream = lzma.LZMAFile(raw)  # noqa: SIM115 -- closed by `with stream` below
    elif codec == "gz":
        stream = gzip.GzipFile(fileobj=raw)
    elif codec == "bz2":
        stream = bz2.BZ2File(raw)
    else:
        stream = raw
    try:
        with stream:
            yield cast(BinaryIO, stream)          # a readable binary file: what tarfile reads
    except errors as exc:
        raise ArchiveRefused(f"unreadable {NAMES.get(codec, 'tar')} stream ({exc})") from None


@contextlib.contextmanager
def _piped(program: str, fd: int, offset: int, length: int, codec: str) -> Iterator[BinaryIO]:
    """program -dc, fed by a thread that sends the member's bytes (sendfile: no copy through Python)."""
    proc = subprocess.Popen([program, *PROGRAMS[codec][1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=_CHUNK)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    for end in (proc.stdin, proc.stdout):        # 1 MiB pipes: fewer switches between the programs
        with contextlib.suppress(OSError):
            fcntl.fcntl(end.fileno(), fcntl.F_SETPIPE_SZ, _CHUNK)

    stdin = proc.stdin

    def feed() -> None:
        pos, end = offset, offset + length
        try:
            while pos < end:
                sent = os.sendfile(stdin.fileno(), fd, pos, min(end - pos, 1 << 24))
                if not sent:
                    break
                pos += sent
        except OSError:
            pass                        # the program stopped reading: its exit status says why
        finally:
            stdin.close()

    feeder = threading.Thread(target=feed, name=f"feed-{PROGRAMS[codec][0]}", daemon=True)
    feeder.start()
    try:
        try:
            yield cast(BinaryIO, proc.stdout)
        except ArchiveRefused:
            proc.kill()                 # a limit was reached: what is left is not read
            raise
        except Exception:
            # a read error: when the program ends on its own (the stream is damaged), its own
            # complaint says it better; a program with much more to say is stopped
            if not _drained(proc.stdout):
                proc.kill()
            proc.wait()
            if proc.returncode > 0:
                raise ArchiveRefused(f"unreadable {NAMES[codec]} stream ({_said(proc)})") from None
            raise
        except BaseException:
            proc.kill()                 # Ctrl-C
            raise
        proc.wait()
        if proc.returncode:
            raise ArchiveRefused(f"unreadable {NAMES[codec]} stream ({_said(proc)})")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        feeder.join()
        proc.stderr.close()


def _drained(stream: IO[bytes], most: int = 64 << 20) -> bool:
    """Read and drop what is left, up to `most` bytes; whether the end was reached."""
    while most > 0:
        chunk = stream.read(min(most, _CHUNK))
        if not chunk:
            return True
        most -= len(chunk)
    return False


def _said(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stderr is not None   # piped
    lines = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"
