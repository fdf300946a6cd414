"""GGUF (version 3) files with the standard library: write a model, read its metadata back.

The layout, little-endian: "GGUF", version (u32), tensor count (u64), metadata count (u64); each
metadata pair as key (string), value type (u32), value; each tensor as name, number of dims (u32),
dims innermost first (u64 each), ggml type (u32), offset in the data section (u64); padding to the
alignment (32); then each tensor's bytes, each padded to the alignment. A string is its length
(u64) and UTF-8 bytes; an array its element type (u32), count (u64) and elements.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32

# metadata value types
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
_SCALARS = {UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f", BOOL: "?",
            UINT64: "Q", INT64: "q", FLOAT64: "d"}

# ggml tensor types: (number, values per block, bytes per block)
F32, F16, Q4_0, Q8_0 = "f32", "f16", "q4_0", "q8_0"
TENSOR_TYPES = {F32: (0, 1, 4), F16: (1, 1, 2), Q4_0: (2, 32, 18), Q8_0: (8, 32, 34)}


class GGUFError(ValueError):
    """Not a GGUF file this reader understands, or a damaged one."""


@dataclass(frozen=True)
class Value:
    """A typed metadata value: `kind` one of the types above; for an ARRAY, `item` is the element type."""
    kind: int
    value: object
    item: int | None = None


@dataclass(frozen=True)
class Tensor:
    """A tensor to write: its shape as numpy writes it (outermost first), its ggml type, and a function
    that writes exactly nbytes() bytes of data to the open file."""
    name: str
    shape: tuple[int, ...]
    type: str
    write: Callable[[BinaryIO, int], None]

    def nbytes(self) -> int:
        _, per_block, block_bytes = TENSOR_TYPES[self.type]
        count = 1
        for d in self.shape:
            count *= d
        if self.shape[-1] % per_block:
            raise ValueError(f"{self.name}: rows of {self.shape[-1]} are not whole {self.type} blocks of {per_block}")
        return count // per_block * block_bytes


def _pad(n: int) -> int:
    return -n % ALIGNMENT


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def _value(kind: int, value: object, item: int | None = None) -> bytes:
    if kind == STRING:
        return _string(str(value))
    if kind == ARRAY:
        assert item is not None, "an ARRAY value names its element type"
        values = list(cast(Sequence[Any], value))
        if item in _SCALARS:   # one struct call for a whole array of numbers (a vocabulary's scores)
            return struct.pack(f"<IQ{len(values)}{_SCALARS[item]}", item, len(values), *values)
        return struct.pack("<IQ", item, len(values)) + b"".join(_value(item, v) for v in values)
    return struct.pack("<" + _SCALARS[kind], value)


def write(path: Path, metadata: Sequence[tuple[str, Value]], tensors: Sequence[Tensor]) -> None:
    """Write a GGUF file at path (the caller renames it into place)."""
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<IQQ", VERSION, len(tensors), len(metadata)))
        f.writelines(_string(key) + struct.pack("<I", v.kind) + _value(v.kind, v.value, v.item) for key, v in metadata)
        offset = 0
        for t in tensors:
            dims = tuple(reversed(t.shape))   # GGUF lists the innermost dimension first
            f.write(_string(t.name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, TENSOR_TYPES[t.type][0], offset))
            offset += t.nbytes() + _pad(t.nbytes())
        f.write(b"\0" * _pad(f.tell()))
        for t in tensors:
            start = f.tell()
            t.write(f, t.nbytes())
            if f.tell() - start != t.nbytes():
                raise AssertionError(f"{t.name}: wrote {f.tell() - start} bytes, not {t.nbytes()}")
            f.write(b"\0" * _pad(t.nbytes()))


# --- reading: metadata (and the tensor table), e.g. an existing model's vocabulary --------------

@dataclass(frozen=True)
class Contents:
    metadata: dict[str, object]
    tensors: dict[str, tuple[tuple[int, ...], int, int]]   # name -> (shape outermost first, ggml type, offset)
    data_start: int = 0                                    # where the tensor data begins in the file
    file_size: int = 0

    def tensor_bytes(self) -> dict[str, int]:
        """Each tensor's bytes in the file, from the offsets (any ggml type, quantised ones included):
        a tensor runs to the next one's start, the last to the end of the file (padding counted, <= alignment)."""
        starts = sorted((offset, name) for name, (_, _, offset) in self.tensors.items())
        ends = [o for o, _ in starts[1:]] + [self.file_size - self.data_start]
        return {name: end - offset for (offset, name), end in zip(starts, ends, strict=True)}


class _Reader:
    def __init__(self, f: BinaryIO, name: str):
        self.f, self.name = f, name

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        data = self.f.read(size)
        if len(data) != size:
            raise GGUFError(f"{self.name}: truncated GGUF file")
        return struct.unpack("<" + fmt, data)

    def string(self) -> str:
        (n,) = self.take("Q")
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFError(f"{self.name}: truncated GGUF file")
        return data.decode("utf-8", errors="replace")

    def value(self, kind: int) -> object:
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.take("IQ")
            if item in _SCALARS:
                return list(self.take(f"{count}{_SCALARS[item]}"))
            return [self.value(item) for _ in range(count)]
        if kind not in _SCALARS:
            raise GGUFError(f"{self.name}: unknown GGUF value type {kind}")
        return self.take(_SCALARS[kind])[0]


def read(path: Path) -> Contents:
    """The metadata and the tensor table of a GGUF file (the tensor data is not read)."""
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file")
        r = _Reader(f, str(path))
        version, n_tensors, n_kv = r.take("IQQ")
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
        metadata = {}
        for _ in range(n_kv):
            key = r.string()
            (kind,) = r.take("I")
            metadata[key] = r.value(kind)
        tensors = {}
        for _ in range(n_tensors):
            name = r.string()
            (n_dims,) = r.take("I")
            dims = r.take(f"{n_dims}Q")
            ggml_type, offset = r.take("IQ")
            tensors[name] = (tuple(reversed(dims)), ggml_type, offset)
        alignment = metadata.get("general.alignment", ALIGNMENT)
        align = alignment if isinstance(alignment, int) and alignment > 0 else ALIGNMENT
        data_start = -(-f.tell() // align) * align
        size = f.seek(0, 2)
    return Contents(metadata, tensors, data_start, size)
