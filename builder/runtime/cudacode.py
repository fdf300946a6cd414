"""Which CUDA code objects an ELF library carries, and whether one of them runs on a given GPU.

nvcc puts every kernel image of a library in the `.nv_fatbin` section (the name is
FATBIN_DATA_SECTION_NAME in CUDA's include/fatbinary_section.h). The section is a run of
fat binary containers, one per linked object file, back to back; each holds entries, one
per code object (SASS for one sm_XY, or PTX for one compute_XY). Only the small headers
are read: libggml-cuda.so carries hundreds of MiB of payload, which is skipped by seeking.

Container header, 16 bytes (struct fatBinaryHeader in NVIDIA's fatbinary.h, little-endian):
    0x00 u32 magic 0xBA55ED50    0x04 u16 version (1)    0x06 u16 header size (16)
    0x08 u64 size of the entries that follow the header

Entry header. NVIDIA does not publish it; this layout was read off CUDA 13.0 nvcc output
(tests/unit/runtime/test_cudacode.py compiles the cases) and agrees with public readers:
    0x00 u16 kind: 1 PTX, 2 ELF cubin (SASS), 8 NVVM IR (LTO, not loadable; skipped)
    0x02 u16 entry version (0x0101)
    0x04 u32 header size: 64; 80 for PTX and 96-120 for sm_100+ cubins (an extension follows)
    0x08 u64 payload size, padded to 8 bytes: the next entry starts at header + payload
    0x10 u32 compressed payload size (0 when stored plain)
    0x18 u16 code version minor, u16 major (PTX ISA 9.0, cubin ABI 1.8)
    0x1c u32 arch: 86 for sm_86 / compute_86, 120 for sm_120
    0x28 u64 flags: 0x1 64-bit, 0x10 Linux host, 0x2000 LZ4- or 0x8000 Zstd-compressed payload,
         0x100000 arch-specific ("a": sm_90a), 0x200000 family-specific ("f": sm_120f)
    0x38 u64 uncompressed payload size (compressed entries only)
Compressed entries (nvcc's default for PTX, -Xfatbin -compress-all for SASS too) keep this
header plain, so the arch is read without decompressing anything.

`__nv_relfatbin` (relocatable device code kept for a later device link, -rdc) is not read:
the driver loads what device linking put in `.nv_fatbin`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from builder.errors import FAILED, AssembleError

SECTION = b".nv_fatbin"
ELF_MAGIC = b"\x7fELF"
FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2
FLAG_ARCH_SPECIFIC = 0x100000   # "a"
FLAG_FAMILY_SPECIFIC = 0x200000  # "f"

_CONTAINER = struct.Struct("<IHHQ")
# kind, version, header size, padded payload size, arch (0x1c), flags (0x28): the first 48 bytes
_ENTRY = struct.Struct("<HHIQ12xI8xQ")
_SASS_RE = re.compile(r"sm_(\d{2,3})([af]?)")
_PTX_RE = re.compile(r"compute_(\d{2,3})([af]?)")
_PAD_CHUNK = 4096


def _key(name: str) -> tuple[int, str]:
    """sm_86 < sm_90 < sm_90a < sm_100f < sm_120: numeric, then plain, "a", "f"."""
    m = _SASS_RE.fullmatch(name) or _PTX_RE.fullmatch(name)
    assert m is not None
    return int(m.group(1)), m.group(2)


def _normalised(names: object, pattern: re.Pattern[str], what: str) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)) \
            or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{what} must be a list of names")
    for n in names:
        if not pattern.fullmatch(n):
            example = "sm_86 or sm_120a" if what == "sass" else "compute_75 or compute_120f"
            raise ValueError(f"{what}: {n!r} is not a name like {example}")
    return tuple(sorted(set(names), key=_key))


@dataclass(frozen=True)
class CudaCode:
    """The code objects a library carries; sorted numerically, no repeats (the constructor sees to it)."""
    sass: tuple[str, ...] = ()   # "sm_86", "sm_120a"
    ptx: tuple[str, ...] = ()    # "compute_75"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sass", _normalised(self.sass, _SASS_RE, "sass"))
        object.__setattr__(self, "ptx", _normalised(self.ptx, _PTX_RE, "ptx"))

    def as_dict(self) -> dict[str, Any]:
        return {"sass": list(self.sass), "ptx": list(self.ptx)}

    @classmethod
    def from_dict(cls, data: object) -> CudaCode:
        """The inverse of as_dict; ValueError naming the first thing that is not a SASS/PTX name."""
        if not isinstance(data, dict) or set(data) != {"sass", "ptx"}:
            raise ValueError("cuda code must be a table with exactly 'sass' and 'ptx'")
        for key in ("sass", "ptx"):
            if not isinstance(data[key], (list, tuple)):
                raise ValueError(f"{key} must be a list of names")
        return cls(tuple(data["sass"]), tuple(data["ptx"]))


# --- reading ----------------------------------------------------------------------------

def read_cuda_code(path: Path | str) -> CudaCode | None:
    """The SASS and PTX in an ELF file's .nv_fatbin; None for a file that is not ELF or has none.

    A truncated or corrupt fat binary is an AssembleError (one line), never a traceback.
    """
    path = Path(path)
    try:
        raw = open(path, "rb", buffering=0)  # noqa: SIM115 -- closed by `with raw`; unbuffered: each header read costs its own bytes only
    except OSError as exc:
        raise AssembleError(f"cannot open ({exc.strerror})", where=str(path), fix="check permissions",
                            code=FAILED) from None
    with raw:
        return scan(raw, str(path))


def scan(stream: BinaryIO, where: str = "") -> CudaCode | None:
    """read_cuda_code over an open binary stream (read/seek/tell); tests count the bytes it reads."""
    stream.seek(0)
    if stream.read(4) != ELF_MAGIC:
        return None
    stream.seek(0, 2)
    size = stream.tell()
    try:
        found = _find_section(stream)
    except Exception as exc:  # noqa: BLE001 -- pyelftools/construct raise many types on a corrupt file
        raise AssembleError(f"not a readable ELF file ({type(exc).__name__}: {exc})", where=where or None,
                            fix="the file is truncated or corrupt: rebuild or re-download it", code=FAILED) from None
    if found is None:
        return None
    offset, length = found
    if offset + length > size:
        raise _corrupt(where, f"the .nv_fatbin section ends at byte {offset + length}, past the end of the "
                              f"file ({size} bytes)")
    sass: set[str] = set()
    ptx: set[str] = set()
    for kind, arch, flags in _entries(stream, offset, length, where):
        suffix = _suffix(flags, where)
        (sass if kind == KIND_SASS else ptx).add(f"{'sm' if kind == KIND_SASS else 'compute'}_{arch}{suffix}")
    return CudaCode(tuple(sass), tuple(ptx))


def _find_section(stream: BinaryIO) -> tuple[int, int] | None:
    """(file offset, size) of .nv_fatbin, from the section headers alone.

    pyelftools' section objects are not built: they parse symbol and hash tables.
    """
    from elftools.common.utils import struct_parse   # here: the CLI starts without pyelftools
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(stream)
    count = elf.num_sections()
    if count == 0:
        return None
    shdr, base, step = elf.structs.Elf_Shdr, elf["e_shoff"], elf["e_shentsize"]
    names = struct_parse(shdr, stream, base + elf.get_shstrndx() * step)
    for i in range(count):
        h = struct_parse(shdr, stream, base + i * step)
        if h["sh_type"] not in ("SHT_PROGBITS", "SHT_NOBITS") or h["sh_name"] >= names["sh_size"]:
            continue
        stream.seek(names["sh_offset"] + h["sh_name"])
        if stream.read(len(SECTION) + 1) == SECTION + b"\0":
            # SHT_NOBITS: a debug-only copy whose section holds no bytes in this file
            return None if h["sh_type"] == "SHT_NOBITS" else (h["sh_offset"], h["sh_size"])
    return None


def _read(stream: BinaryIO, pos: int, n: int, where: str) -> bytes:
    stream.seek(pos)
    data = stream.read(n)
    if len(data) != n:
        raise _corrupt(where, f"the file ends inside the .nv_fatbin section (at byte {pos + len(data)})")
    return data


def _entries(stream: BinaryIO, offset: int, length: int, where: str) -> Iterator[tuple[int, int, int]]:
    """(kind, arch, flags) of every PTX and SASS entry; other kinds are stepped over."""
    pos, end = offset, offset + length
    while pos < end:
        if end - pos < _CONTAINER.size:
            tail = _read(stream, pos, end - pos, where)
            if tail.strip(b"\0"):
                raise _corrupt(where, f"{end - pos} stray bytes at the end of the .nv_fatbin section")
            return
        magic, version, head, body = _CONTAINER.unpack(_read(stream, pos, _CONTAINER.size, where))
        if magic != FATBIN_MAGIC:
            if magic == 0:   # alignment padding between containers (linkers may align input sections)
                pos = _skip_zeros(stream, pos, end, where)
                continue
            raise _corrupt(where, f"no fat binary container at section offset {pos - offset:#x} "
                                  f"(magic {magic:#010x})")
        if version != 1:
            raise AssembleError(f"fat binary container version {version} is not one assemble knows (1)",
                                where=where or None, fix="update assemble", code=FAILED)
        stop = pos + head + body
        if head < _CONTAINER.size or stop > end:
            raise _corrupt(where, f"the container at section offset {pos - offset:#x} claims {head + body} "
                                  f"bytes, past the end of the section")
        entry = pos + head
        while entry < stop:
            if stop - entry < _ENTRY.size:
                raise _corrupt(where, f"a truncated entry header at section offset {entry - offset:#x}")
            kind, _ver, entry_head, payload, arch, flags = _ENTRY.unpack(_read(stream, entry, _ENTRY.size, where))
            if entry_head < _ENTRY.size or entry + entry_head + payload > stop:
                raise _corrupt(where, f"the entry at section offset {entry - offset:#x} does not fit its container")
            if kind in (KIND_PTX, KIND_SASS):
                if not 10 <= arch <= 999:
                    raise _corrupt(where, f"the entry at section offset {entry - offset:#x} names arch {arch}")
                yield kind, arch, flags
            entry += entry_head + payload
        pos = stop


def _skip_zeros(stream: BinaryIO, pos: int, end: int, where: str) -> int:
    """The first non-zero byte at or after pos (end if none), which must start a container."""
    while pos < end:
        chunk = _read(stream, pos, min(_PAD_CHUNK, end - pos), where)
        stripped = chunk.lstrip(b"\0")
        if stripped:
            pos += len(chunk) - len(stripped)
            if pos % 8:
                raise _corrupt(where, f"a container at unaligned file offset {pos:#x}")
            return pos
        pos += len(chunk)
    return end


def _suffix(flags: int, where: str) -> str:
    a, f = bool(flags & FLAG_ARCH_SPECIFIC), bool(flags & FLAG_FAMILY_SPECIFIC)
    if a and f:
        raise _corrupt(where, "an entry is marked both arch-specific and family-specific")
    return "a" if a else "f" if f else ""


def _corrupt(where: str, what: str) -> AssembleError:
    return AssembleError(f"corrupt CUDA fat binary: {what}", where=where or None,
                         fix="the file is truncated or corrupt: rebuild or re-download it", code=FAILED)


# --- compatibility ----------------------------------------------------------------------
# NVIDIA's rules (CUDA C++ Programming Guide, "Binary Compatibility" and "PTX Compatibility",
# and the appendix "Compute Capabilities" > "Feature Availability" on architecture- and
# family-specific feature sets; Blackwell Compatibility Guide 1.2 "Application Compatibility
# on Blackwell Architecture"; NVIDIA blog "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce
# Family-Specific Architecture Features"):
#   SASS sm_XY runs on X.Z for the same major X and Z >= Y (8.6 cubin on 8.9, never on 9.0);
#   SASS sm_XYa (arch-specific) runs on exactly X.Y;
#   SASS sm_XYf (family-specific) runs on the devices of its family: same major X, minor >= Y
#   (sm_100f on 10.0 and 10.3; sm_103f on 10.3 only; sm_120f on 12.0 and 12.1);
#   PTX compute_XY is JIT-compiled by the driver for any capability >= XY; compute_XYa only for
#   exactly X.Y and compute_XYf only within its family (same major, minor >= Y).

def _cc(value: int) -> str:
    return f"{value // 10}.{value % 10}"


def _sass_runs(num: int, suffix: str, cap: int) -> bool:
    if suffix == "a":
        return num == cap
    return num // 10 == cap // 10 and num <= cap


def _ptx_jits(num: int, suffix: str, cap: int) -> bool:
    if suffix == "a":
        return num == cap
    if suffix == "f":
        return num // 10 == cap // 10 and num <= cap
    return num <= cap


def _limit(name: str, num: int, suffix: str) -> str:
    """What a code object needs, in words: 'sm_86 needs 8.6 or a newer 8.x'."""
    if suffix == "a":
        return f"{name} runs only on {_cc(num)}"
    if suffix == "f" or name.startswith("sm_"):
        return f"{name} needs {_cc(num)} or a newer {num // 10}.x"
    return f"{name} needs {_cc(num)} or newer"


def runs_on(code: CudaCode, capability: int) -> tuple[bool, str]:
    """Can a device of this compute capability (x10: 89 = 8.9, 120 = 12.0) run this code, and why."""
    if isinstance(capability, bool) or not isinstance(capability, int) or not 10 <= capability <= 999:
        raise ValueError(f"capability must be a compute capability x10 like 89 or 120, not {capability!r}")
    cc, major = _cc(capability), capability // 10
    # the closest match: the highest arch, and of one arch the most specific build
    rank = {"": 0, "f": 1, "a": 2}
    sass = [(_key(n), n) for n in code.sass]
    usable = [(num, rank[sfx], n) for (num, sfx), n in sass if _sass_runs(num, sfx, capability)]
    if usable:
        num, _, name = max(usable)
        suffix = _key(name)[1]
        if suffix == "a":
            why = "arch-specific, built for exactly this capability"
        elif num == capability:
            why = "built for this capability" + (", family-specific" if suffix == "f" else "")
        elif suffix == "f":
            why = f"same family {major}.x, binary compatible"
        else:
            why = "same major, binary compatible"
        return True, f"SASS {name} runs on {cc} ({why})"
    same_major = [(num, sfx, n) for (num, sfx), n in sass if num // 10 == major]
    if same_major:
        head = f"no SASS for {cc} ({'; '.join(_limit(n, num, sfx) for num, sfx, n in same_major)})"
    else:
        head = f"no SASS for {major}.x"
    ptx = [(_key(n), n) for n in code.ptx]
    jit = [(num, rank[sfx], n) for (num, sfx), n in ptx if _ptx_jits(num, sfx, capability)]
    if jit:
        name = max(jit)[2]
        return True, (f"{head}; PTX {name} is JIT-compiled by the driver at first use (slow first start, "
                      f"needs a driver at least as new as the toolkit)")
    below = [(num, sfx, n) for (num, sfx), n in ptx if num <= capability]
    if below:
        limits = "; ".join(_limit(n, num, sfx) for num, sfx, n in below)
        return False, f"{head} and no PTX the driver can JIT for {cc} ({limits})"
    return False, f"{head} and no PTX at or below compute_{capability}"


def needs_jit(code: CudaCode, capability: int) -> bool:
    """True when no SASS runs on this capability and only PTX can serve it: then the driver compiles
    the PTX, which it can only do for PTX no newer than itself."""
    return not any(_sass_runs(*_key(n), capability) for n in code.sass) and runs_on(code, capability)[0]
