"""The one sha256 helper: files are hashed in large chunks with the GIL released, so several
files (or a copy and its hash) proceed in parallel."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 4 << 20


def sha256_file(path: Path | str) -> str:
    h = hashlib.sha256()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])           # hashlib releases the GIL here
    return h.hexdigest()
