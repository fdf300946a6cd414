"""Set DT_RPATH and add DT_NEEDED on a copy of a large ELF file without rewriting it.

patchelf reads the whole file, rebuilds it and writes it out: 3 s and 2.4 GB of memory for a
1.2 GB libggml-hip.so. The same edit fits at the end of the file instead: the kernel copies
the bytes (copy_file_range), then a new .dynstr (the old one, whole, plus the new strings:
every old string offset stays valid) and a new .dynamic go after the last byte, in a new
PT_LOAD, and PT_DYNAMIC points at them. The old .dynamic stays where it was, unused. Section
headers of .dynamic and .dynstr are moved too, so readelf and debuggers read what the loader reads.

The new PT_LOAD needs a program header slot, and no existing segment gives up its own: every
PT_NOTE (the GNU build-id that debuggers, crash symbolisers and debuginfod key on; the GNU
property note of x86 CET / aarch64 BTI) stays. A PT_NULL slot is taken when the file has one;
otherwise the program header table, one entry longer, moves to the start of the appended region,
inside the new PT_LOAD (glibc finds a library's table in whichever segment maps e_phoff), and
PT_PHDR follows it. For an executable, the appended region sits at the same address-minus-offset
as the first PT_LOAD: kernels before 5.18 give ld.so AT_PHDR = load address + e_phoff.

Only what this shape allows is done here (little-endian ELF64, x86-64 or aarch64; an executable
only with a PT_PHDR); anything else returns False and the caller uses patchelf.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from pathlib import Path

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
PT_NULL, PT_LOAD, PT_DYNAMIC, PT_INTERP, PT_PHDR = 0, 1, 2, 3, 6
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 15, 29
SHT_DYNAMIC, SHT_STRTAB = 6, 3
PF_R, PF_W = 4, 2
ET_EXEC, ET_DYN, EM_X86_64, EM_AARCH64 = 2, 3, 62, 183
_E_PHOFF, _E_PHNUM = 0x20, 0x38          # where the ELF64 header keeps them
# Below this size patchelf's whole-file rewrite costs less than a second: it stays the tool.
MIN_SIZE = 128 << 20


@dataclass(frozen=True)
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
        if e_type not in (ET_DYN, ET_EXEC) or e_machine not in (EM_X86_64, EM_AARCH64) \
                or e_phentsize != _PHDR.size:
            return False
        f.seek(e_phoff)
        phdrs = [_Phdr(*_PHDR.unpack(f.read(_PHDR.size))) for _ in range(e_phnum)]
        loads = [p for p in phdrs if p.type == PT_LOAD]
        dynamic = next((p for p in phdrs if p.type == PT_DYNAMIC), None)
        executable = any(p.type == PT_INTERP for p in phdrs)
        free = next((i for i, p in enumerate(phdrs) if p.type == PT_NULL), None)
        # moving the table of an executable needs PT_PHDR: ld.so computes the load bias from it
        if not loads or dynamic is None or (free is None and executable
                                            and not any(p.type == PT_PHDR for p in phdrs)):
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
        strings = bytearray(f.read(tags[DT_STRSZ]))

        def add_string(s: str) -> int:
            at = len(strings)
            strings.extend(s.encode() + b"\0")
            return at

        new_entries = [(DT_NEEDED, add_string(n)) for n in add_needed]
        new_entries += [(t, v) for t, v in entries if t not in (DT_RPATH, DT_RUNPATH)]
        new_entries.append((DT_RPATH, add_string(rpath)))
        new_entries.append((DT_NULL, 0))

        sections = []
        if e_shoff and e_shentsize == _SHDR.size:
            f.seek(e_shoff)
            sections = [list(_SHDR.unpack(f.read(_SHDR.size))) for _ in range(e_shnum)]

        # where the appended region goes: past the file's last byte and the last mapped address
        align = max(p.align for p in loads) or 0x1000
        f.seek(0, 2)
        base_off = _align(f.tell(), align)
        top = _align(max(p.vaddr + p.memsz for p in loads), align)
        if executable:            # address - offset as the first PT_LOAD's: AT_PHDR on older kernels
            bias = loads[0].vaddr - loads[0].offset
            base_off = max(base_off, top - bias)
            base_vaddr = base_off + bias
        else:
            base_vaddr = top

        # the region: [program header table, when it moves] .dynstr .dynamic
        table_size = 0 if free is not None else (e_phnum + 1) * _PHDR.size
        str_rel = _align(table_size, 8)
        dyn_rel = str_rel + _align(len(strings), 8)
        str_vaddr, dyn_vaddr = base_vaddr + str_rel, base_vaddr + dyn_rel
        new_entries = [(DT_STRTAB, str_vaddr) if t == DT_STRTAB else (DT_STRSZ, len(strings)) if t == DT_STRSZ
                       else (t, v) for t, v in new_entries]
        dyn_bytes = b"".join(_DYN.pack(t, v) for t, v in new_entries)
        size = dyn_rel + len(dyn_bytes)

        # the new PT_LOAD goes after the last PT_LOAD, so the loads stay in ascending address
        # order (ld.so and the kernel map first..last); every other header keeps its place
        new_load = _Phdr(PT_LOAD, PF_R | PF_W, base_off, base_vaddr, base_vaddr, size, size, align)
        kept = [p for i, p in enumerate(phdrs) if i != free]
        moved = []
        for p in kept:
            if p.type == PT_DYNAMIC:
                p = replace(p, offset=base_off + dyn_rel, vaddr=dyn_vaddr, paddr=dyn_vaddr,
                            filesz=len(dyn_bytes), memsz=len(dyn_bytes))
            elif p.type == PT_PHDR and free is None:
                p = replace(p, offset=base_off, vaddr=base_vaddr, paddr=base_vaddr, filesz=table_size,
                            memsz=table_size)
            moved.append(p)
        last_load = max(i for i, p in enumerate(moved) if p.type == PT_LOAD)
        ordered = moved[:last_load + 1] + [new_load] + moved[last_load + 1:]
        table = b"".join(p.pack() for p in ordered)

        region = bytearray(size)
        region[:table_size] = table if free is None else b""
        region[str_rel:str_rel + len(strings)] = strings
        region[dyn_rel:] = dyn_bytes

        # all reads done; the writes: the appended region, then the headers that point at it
        f.truncate(base_off)
        f.seek(base_off)
        f.write(region)
        if free is None:
            f.seek(_E_PHOFF)
            f.write(struct.pack("<Q", base_off))
            f.seek(_E_PHNUM)
            f.write(struct.pack("<H", e_phnum + 1))
        else:
            f.seek(e_phoff)
            f.write(table)
        for i, sh in enumerate(sections):
            sh_type, sh_offset = sh[1], sh[4]
            if sh_type == SHT_DYNAMIC:
                sh[3], sh[4], sh[5] = dyn_vaddr, base_off + dyn_rel, len(dyn_bytes)
            elif sh_type == SHT_STRTAB and sh_offset == str_off:
                sh[3], sh[4], sh[5] = str_vaddr, base_off + str_rel, len(strings)
            else:
                continue
            f.seek(e_shoff + i * _SHDR.size)
            f.write(_SHDR.pack(*sh))
    return True
