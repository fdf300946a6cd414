"""What a PE file (.exe, .dll) is and needs, read with pefile: its machine, the DLLs it imports
(normal and delay-loaded) with the names it takes from each, and the names it exports."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pefile

from builder.errors import AssembleError

MACHINES = {0x8664: "x64", 0x14C: "x86", 0xAA64: "arm64", 0x1C4: "arm"}
_DIRS = [pefile.DIRECTORY_ENTRY[d] for d in ("IMAGE_DIRECTORY_ENTRY_IMPORT", "IMAGE_DIRECTORY_ENTRY_EXPORT",
                                            "IMAGE_DIRECTORY_ENTRY_DELAY_IMPORT")]


@dataclass(frozen=True)
class PeFile:
    path: Path
    machine: str                              # x64, x86, arm64, or 0x.... for others
    dll: bool
    imports: tuple[str, ...]                  # DLL names as written, normal then delay-loaded
    delay_imports: tuple[str, ...]
    symbols: tuple[tuple[str, str], ...]      # (dll lower-cased, name) imported by name
    exports: frozenset[str]

    def imported_from(self, dll: str) -> set[str]:
        return {name for d, name in self.symbols if d == dll.lower()}


def is_pe(path: Path) -> bool:
    """An MZ header pointing at a "PE\\0\\0" signature (a cheap look; read_pe parses for real)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:2] != b"MZ":
                return False
            f.seek(struct.unpack_from("<I", head, 0x3C)[0])
            return f.read(4) == b"PE\0\0"
    except OSError:
        return False


def _name(raw: bytes | None) -> str:
    return (raw or b"").decode("ascii", "replace")


def read_pe(path: Path) -> PeFile:
    """The facts of one PE file; one clear line when it is not one or is damaged."""
    try:
        pe = pefile.PE(str(path), fast_load=True)
        pe.parse_data_directories(directories=_DIRS)
    except (pefile.PEFormatError, OSError, struct.error, ValueError) as exc:
        raise AssembleError(f"not a readable PE file ({exc})", where=str(path),
                            fix="the file is damaged or not a Windows binary: fetch the input again") from None
    try:
        machine = MACHINES.get(pe.FILE_HEADER.Machine, f"0x{pe.FILE_HEADER.Machine:04x}")
        dll = bool(pe.FILE_HEADER.Characteristics & 0x2000)
        imports: list[str] = []
        delay: list[str] = []
        symbols: list[tuple[str, str]] = []
        for attr, into in (("DIRECTORY_ENTRY_IMPORT", imports), ("DIRECTORY_ENTRY_DELAY_IMPORT", delay)):
            for entry in getattr(pe, attr, []):
                name = _name(entry.dll)
                into.append(name)
                symbols += [(name.lower(), _name(i.name)) for i in entry.imports if i.name]
        exports = frozenset(_name(s.name) for s in getattr(getattr(pe, "DIRECTORY_ENTRY_EXPORT", None), "symbols", [])
                            if s.name)
    finally:
        pe.close()
    return PeFile(path, machine, dll, tuple(imports + delay), tuple(delay), tuple(symbols), exports)
