"""Minimal PE32+ files written here (no cross-compiler): an x64 .exe or .dll with an import table and
an export table, enough for pefile and builder.windows to read what a Windows release zip holds --
which DLLs each file imports, by which names, and what the ggml base exports. Nothing runs them."""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

_RVA = 0x1000                 # the one section's address
_RAW = 0x200                  # and where it lies in the file


class _Section:
    """The section's bytes, with the RVA of everything put in it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def put(self, blob: bytes, align: int = 2) -> int:
        self.data += b"\0" * (-len(self.data) % align)
        rva = _RVA + len(self.data)
        self.data += blob
        return rva

    def patch(self, rva: int, fmt: str, *values: int) -> None:
        struct.pack_into(fmt, self.data, rva - _RVA, *values)


def _imports(sec: _Section, imports: Mapping[str, Sequence[str]]) -> tuple[int, int]:
    """The import directory (RVA, size): one descriptor per DLL, its lookup and address tables."""
    if not imports:
        return 0, 0
    table = sec.put(b"\0" * (20 * (len(imports) + 1)), 4)
    for i, (dll, names) in enumerate(imports.items()):
        hints = [sec.put(struct.pack("<H", 0) + n.encode() + b"\0") for n in names]
        thunks = b"".join(struct.pack("<Q", h) for h in hints) + b"\0" * 8
        lookup, address = sec.put(thunks, 8), sec.put(thunks, 8)
        name = sec.put(dll.encode() + b"\0")
        sec.patch(table + 20 * i, "<IIIII", lookup, 0, 0, name, address)
    return table, 20 * (len(imports) + 1)


def _exports(sec: _Section, dll_name: str, exports: Sequence[str]) -> tuple[int, int]:
    """The export directory (RVA, size): every name points at the section's first byte."""
    if not exports:
        return 0, 0
    names = sorted(exports)
    start = sec.put(b"\0" * 40, 4)
    functions = sec.put(b"".join(struct.pack("<I", _RVA) for _ in names), 4)
    strings = [sec.put(n.encode() + b"\0") for n in names]
    pointers = sec.put(b"".join(struct.pack("<I", s) for s in strings), 4)
    ordinals = sec.put(b"".join(struct.pack("<H", i) for i in range(len(names))))
    own = sec.put(dll_name.encode() + b"\0")
    sec.patch(start, "<IIHHIIIIIII", 0, 0, 0, 0, own, 1, len(names), len(names), functions, pointers, ordinals)
    return start, _RVA + len(sec.data) - start


def pe_file(path: Path, imports: Mapping[str, Sequence[str]] = {}, exports: Sequence[str] = ()) -> Path:
    """Write an x64 PE file: a DLL when the name ends in .dll, else an executable."""
    dll = path.suffix.lower() == ".dll"
    sec = _Section()
    sec.put(b"\xc3" * 16)                                   # the address every export points at
    imp = _imports(sec, imports)
    exp = _exports(sec, path.name, exports)
    raw = bytes(sec.data) + b"\0" * (-len(sec.data) % 0x200)
    image = _RVA + ((len(sec.data) + 0xFFF) & ~0xFFF)
    dirs = [exp, imp] + [(0, 0)] * 14
    optional = struct.pack("<HBBIIIII", 0x20B, 14, 0, 0, len(raw), 0, 0, _RVA)
    optional += struct.pack("<QIIHHHHHHIIIIHHQQQQII", 0x180000000 if dll else 0x140000000, 0x1000, 0x200,
                            6, 0, 0, 0, 6, 0, 0, image, _RAW, 0, 3, 0x160, 0x100000, 0x1000, 0x100000, 0x1000, 0, 16)
    optional += b"".join(struct.pack("<II", rva, size) for rva, size in dirs)
    coff = struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, len(optional), 0x2022 if dll else 0x0022)
    section = struct.pack("<8sIIIIIIHHI", b".rdata", len(sec.data), _RVA, len(raw), _RAW, 0, 0, 0, 0, 0x40000040)
    head = b"MZ" + b"\0" * 58 + struct.pack("<I", 0x40) + b"PE\0\0" + coff + optional + section
    path.write_bytes(head + b"\0" * (_RAW - len(head)) + raw)
    return path


def upstream_windows_zip(folder: Path, name: str = "llama-b7500-bin-win-cpu-x64.zip", *,
                         reads_cwd: bool = True) -> Path:
    """An upstream-style Windows release zip (one flat folder): llama-server.exe over llama.dll, ggml.dll
    (the loader; with reads_cwd it imports GetCurrentDirectoryW, as upstream's unpatched loader imports
    a way to read the working directory) and ggml-base.dll, and the CPU backend module."""
    src = folder / name.removesuffix(".zip")
    src.mkdir(parents=True)
    kernel = ["GetModuleFileNameW", *(["GetCurrentDirectoryW"] if reads_cwd else [])]
    pe_file(src / "ggml-base.dll", {"KERNEL32.dll": ["GetLastError"]}, ["ggml_init", "gguf_init"])
    pe_file(src / "ggml.dll", {"ggml-base.dll": ["ggml_init"], "KERNEL32.dll": kernel}, ["ggml_backend_load_all"])
    pe_file(src / "llama.dll", {"ggml.dll": ["ggml_backend_load_all"], "ggml-base.dll": ["ggml_init"]},
            ["llama_init"])
    pe_file(src / "ggml-cpu.dll", {"ggml-base.dll": ["ggml_init"]}, ["ggml_backend_init", "ggml_backend_score"])
    pe_file(src / "llama-server.exe", {"llama.dll": ["llama_init"], "KERNEL32.dll": ["ExitProcess"]})
    (src / "LICENSE").write_text("MIT License\n\nCopyright (c) 2023-2026 The ggml authors\n")
    out = folder / name
    with zipfile.ZipFile(out, "w") as zf:
        for p in sorted(src.iterdir()):
            zf.write(p, p.name)
    return out
