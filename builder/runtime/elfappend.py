"""Set DT_RPATH and add DT_NEEDED on a copy of a large shared object without rewriting it.

patchelf reads the whole file, rebuilds it and writes it out: 3 s and 2.4 GB of memory for a
1.2 GB libggml-hip.so. The same edit fits at the end of the file instead: the kernel copies
the bytes (copy_file_range), then a new .dynstr (the old one, whole, plus the new strings:
every old string offset stays valid) and a new .dynamic go after the last byte, in a new
PT_LOAD that takes the place of a PT_NOTE program header, and PT_DYNAMIC points at them.
The old .dynamic stays where it was, unused. Section headers of .dynamic and .dynstr are
moved too, so readelf and debuggers read what the loader reads.

Only what this shape allows is done here (little-endian ELF64 shared objects without an
interpreter, with a PT_NOTE to take); anything else returns False and the caller uses patchelf.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_NOTE, PT_GNU_PROPERTY = 1, 2, 3, 4, 0x6474E553
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
SHT_DYNAMIC, SHT_STRTAB = 6, 3
PF_R, PF_W = 4, 2
ET_DYN, EM_X86_64, EM_AARCH64 = 3, 62, 183
# Below this size patchelf's whole-file rewrite costs less than a second: it stays the tool.
MIN_SIZE = 128 << 20


@dataclass
class _Phdr:
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int

    def pack(self) -> bytes:
        return _PHDR.pack(self.type, self.flags, self.offset, self.vaddr, self.paddr, self.filesz, self.memsz,
                          self.align)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a if a > 1 else n


def patch_in_place(path: Path, rpath: str, add_needed: tuple[str, ...]) -> bool:
    """Give `path` (a copy this tool owns) DT_RPATH=rpath, no DT_RUNPATH, and the extra DT_NEEDED
    entries first (as patchelf --add-needed does). False, and the file untouched, when its shape
    is not one this module handles or its headers are cut short (patchelf then says what is wrong)."""
    try:
        return _patch(path, rpath, add_needed)
    except struct.error:          # a header read past the end: every read comes before the first write
        return False


def _patch(path: Path, rpath: str, add_needed: tuple[str, ...]) -> bool:
    with open(path, "r+b") as f:
        head = f.read(_EHDR.size)
        if len(head) < _EHDR.size or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            return False
        (_, e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize, e_shnum,
         _) = _EHDR.unpack(head)
        if e_type != ET_DYN or e_machine not in (EM_X86_64, EM_AARCH64) or e_phentsize != _PHDR.size:
            return False
        f.seek(e_phoff)
        phdrs = [_Phdr(*_PHDR.unpack(f.read(_PHDR.size))) for _ in range(e_phnum)]
        if any(p.type == PT_INTERP for p in phdrs):
            return False
        loads = [p for p in phdrs if p.type == PT_LOAD]
        dynamic = next((p for p in phdrs if p.type == PT_DYNAMIC), None)
        # the PT_NOTE to take: any, once PT_GNU_PROPERTY describes the GNU property note (x86 CET,
        # aarch64 BTI markers); else one that does not hold it, so the loader still finds them
        has_property = any(p.type == PT_GNU_PROPERTY for p in phdrs)
        notes = [i for i, p in enumerate(phdrs) if p.type == PT_NOTE
                 and (has_property or not _holds_property(f, p))]
        if not loads or dynamic is None or not notes:
            return False

        def offset_of(addr: int) -> int | None:
            for p in loads:
                if p.vaddr <= addr < p.vaddr + p.filesz:
                    return addr - p.vaddr + p.offset
            return None

        f.seek(dynamic.offset)
        raw = f.read(dynamic.filesz)
        entries = []
        for pos in range(0, len(raw) - _DYN.size + 1, _DYN.size):
            tag, val = _DYN.unpack_from(raw, pos)
            if tag == DT_NULL:
                break
            entries.append((tag, val))
        tags = dict(entries)
        if DT_STRTAB not in tags or DT_STRSZ not in tags:
            return False
        str_off = offset_of(tags[DT_STRTAB])
        if str_off is None:
            return False
        f.seek(str_off)
        old_strings = f.read(tags[DT_STRSZ])

        strings = bytearray(old_strings)

        def add_string(s: str) -> int:
            at = len(strings)
            strings.extend(s.encode() + b"\0")
            return at

        new_entries = [(DT_NEEDED, add_string(n)) for n in add_needed]
        for tag, val in entries:
            if tag in (DT_RPATH, DT_RUNPATH):
                continue
            new_entries.append((tag, val))
        new_entries.append((DT_RPATH, add_string(rpath)))
        new_entries.append((DT_NULL, 0))

        align = max(p.align for p in loads) or 0x1000
        f.seek(0, 2)
        end_of_file = f.tell()
        base_off = _align(end_of_file, align)
        base_vaddr = _align(max(p.vaddr + p.memsz for p in loads), align)
        dyn_rel = _align(len(strings), 8)
        str_vaddr, dyn_vaddr = base_vaddr, base_vaddr + dyn_rel
        new_entries = [(DT_STRTAB, str_vaddr) if t == DT_STRTAB else (DT_STRSZ, len(strings)) if t == DT_STRSZ
                       else (t, v) for t, v in new_entries]
        dyn_bytes = b"".join(_DYN.pack(t, v) for t, v in new_entries)
        region = bytes(strings) + b"\0" * (dyn_rel - len(strings)) + dyn_bytes

        # program headers: the chosen note becomes the new PT_LOAD, placed after the last
        # PT_LOAD so the loads stay in ascending address order (ld.so maps first..last)
        taken = notes[-1]
        new_load = _Phdr(PT_LOAD, PF_R | PF_W, base_off, base_vaddr, base_vaddr, len(region), len(region), align)
        rest = [p for i, p in enumerate(phdrs) if i != taken]
        last_load = max(i for i, p in enumerate(rest) if p.type == PT_LOAD)
        ordered = rest[:last_load + 1] + [new_load] + rest[last_load + 1:]
        dynamic.offset, dynamic.vaddr, dynamic.paddr = base_off + dyn_rel, dyn_vaddr, dyn_vaddr
        dynamic.filesz = dynamic.memsz = len(dyn_bytes)

        sections = []
        if e_shoff and e_shentsize == _SHDR.size:
            f.seek(e_shoff)
            sections = [list(_SHDR.unpack(f.read(_SHDR.size))) for _ in range(e_shnum)]

        # all reads done; the writes: the appended region, then the headers that point at it
        f.truncate(base_off)
        f.seek(base_off)
        f.write(region)
        f.seek(e_phoff)
        f.write(b"".join(p.pack() for p in ordered))
        for i, sh in enumerate(sections):
            sh_type, sh_offset = sh[1], sh[4]
            if sh_type == SHT_DYNAMIC:
                sh[3], sh[4], sh[5] = dyn_vaddr, base_off + dyn_rel, len(dyn_bytes)
            elif sh_type == SHT_STRTAB and sh_offset == str_off:
                sh[3], sh[4], sh[5] = str_vaddr, base_off, len(strings)
            else:
                continue
            f.seek(e_shoff + i * _SHDR.size)
            f.write(_SHDR.pack(*sh))
    return True


def _holds_property(f: BinaryIO, note: _Phdr) -> bool:
    """Whether a PT_NOTE holds an NT_GNU_PROPERTY_TYPE_0 note (x86 CET, aarch64 BTI markers)."""
    f.seek(note.offset)
    data = f.read(min(note.filesz, 1 << 16))
    step = 8 if note.align == 8 else 4
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
        if ntype == 5 and data[pos + 12:pos + 12 + namesz].startswith(b"GNU"):
            return True
        pos += 12 + _align(namesz, step) + _align(descsz, step)
    return False
