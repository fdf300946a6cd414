"""ELF facts from headers only, and library lookup the way ld.so does it.

read_elf() reads the ELF header, the program headers, the dynamic segment and
the strings and version records it points to: 5-20 KiB even for a 550 MiB
libcublasLt (ElfInfo.bytes_read says how much). Nothing maps or hashes a whole file.

Lookup order (glibc elf/dl-load.c, _dl_map_object), for a NEEDED name without
a slash, requested by object R that was itself loaded by R1, R2, ... (the
"loader chain", ending at the executable):
  1. an object already loaded under that SONAME (the caller models this);
  2. unless R has DT_RUNPATH: DT_RPATH of R, R1, R2, ..., then of the
     executable (an object with DT_RUNPATH contributes no DT_RPATH);
  3. LD_LIBRARY_PATH;
  4. DT_RUNPATH of R only (it is not inherited);
  5. [assemble only] the extra directories a recipe's toolchains add;
  6. ld.so.cache (here: the directories of /etc/ld.so.conf), unless R has DF_1_NODEFLIB;
  7. the system directories, unless DF_1_NODEFLIB.
A candidate of the wrong ELF class or machine is skipped, as ld.so skips it.
Link-time stubs (a `stubs/` directory, e.g. CUDA's libcuda.so) are skipped too:
ld.so would load them, but they fail at run time with CUDA_ERROR_STUB_LIBRARY.
"""

from __future__ import annotations

import glob
import os
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from builder.config.glibc import SYMBOL_PREFIX
from builder.errors import FAILED, AssembleError

T = TypeVar("T")

ELF_MAGIC = b"\x7fELF"

# Debian/Ubuntu multiarch triplets: the first system directories ld.so searches.
_TRIPLETS = {
    "EM_X86_64": "x86_64-linux-gnu",
    "EM_AARCH64": "aarch64-linux-gnu",
    "EM_386": "i386-linux-gnu",
    "EM_PPC64": "powerpc64le-linux-gnu",
    "EM_RISCV": "riscv64-linux-gnu",
    "EM_S390": "s390x-linux-gnu",
}
_PLATFORM = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_386": "i686"}


@dataclass(frozen=True)
class ElfInfo:
    """What the dynamic loader needs to know about one file."""
    path: Path                        # as opened (not symlink-resolved: $ORIGIN of a library is its opened dir)
    elf_class: int                    # 32 | 64
    machine: str                      # e_machine, e.g. "EM_X86_64"
    etype: str                        # "ET_DYN" | "ET_EXEC" | ...
    soname: str | None = None
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()       # DT_RPATH entries as written ($ORIGIN unexpanded)
    runpath: tuple[str, ...] = ()     # DT_RUNPATH entries as written
    interpreter: str | None = None    # PT_INTERP: set for programs, not for libraries
    nodeflib: bool = False            # DF_1_NODEFLIB: skip ld.so.cache and system dirs
    version_needs: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (library, ("GLIBC_2.34", ...))
    size: int = 0
    bytes_read: int = 0               # how much of the file parsing touched

    @property
    def is_program(self) -> bool:
        return self.interpreter is not None

    @property
    def has_dynamic(self) -> bool:
        return bool(self.needed or self.soname or self.rpath or self.runpath)

    @property
    def search_rpath(self) -> tuple[str, ...]:
        """DT_RPATH as ld.so uses it: ignored when DT_RUNPATH is present."""
        return () if self.runpath else self.rpath

    def origin(self) -> Path:
        """$ORIGIN: the directory the object was opened from; a program's is resolved (/proc/self/exe)."""
        p = self.path if self.path.is_absolute() else Path.cwd() / self.path
        return p.resolve().parent if self.is_program else p.parent

    def max_version(self, prefix: str) -> str | None:
        """Highest symbol version with this prefix that the file needs, e.g. "GLIBC_" -> "2.34"."""
        return _strip(max_version(v for _, vs in self.version_needs for v in vs if v.startswith(prefix)), prefix)


def _strip(v: str | None, prefix: str) -> str | None:
    return v[len(prefix):] if v else None


def version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def max_version(versions: Iterable[str]) -> str | None:
    """The highest of "GLIBC_2.17", "GLIBC_2.34", ... by numeric parts (None when empty)."""
    best = None
    for v in versions:
        if not re.search(r"\d", v):
            continue  # GLIBC_PRIVATE and the like carry no version
        if best is None or version_key(v) > version_key(best):
            best = v
    return best


@dataclass(frozen=True)
class VersionNeed:
    """The highest symbol version of one family that a set of files needs, and the file needing it."""
    version: str          # "2.38"
    symbol: str           # "GLIBC_2.38", as .gnu.version_r names it
    file: str             # the file that needs it (the first by name when several do)


def highest_need(files: Iterable[tuple[str, ElfInfo]], prefix: str = SYMBOL_PREFIX) -> VersionNeed | None:
    """Across (name, ElfInfo) pairs: which version of `prefix` is the newest any of them needs, and who."""
    best: VersionNeed | None = None
    for name, info in sorted(files, key=lambda f: f[0]):
        v = info.max_version(prefix)
        if v is not None and (best is None or version_key(v) > version_key(best.version)):
            best = VersionNeed(v, prefix + v, name)
    return best


def folder_need(root: Path, folders: Sequence[str] = ("bin", "lib"), prefix: str = SYMBOL_PREFIX) -> VersionNeed | None:
    """highest_need over the ELF files directly in root's `folders` (symlinks are their targets' names)."""
    found = []
    for folder in folders:
        d = Path(root) / folder
        for p in sorted(d.iterdir()) if d.is_dir() else ():
            if p.is_file() and not p.is_symlink() and (info := read_elf(p)) is not None:
                found.append((f"{folder}/{p.name}", info))
    return highest_need(found, prefix)


class _CountingReader:
    """A read-only stream that counts the bytes pyelftools pulls in (the header-only promise, checked)."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self.count += len(data)
        return data

    def seek(self, off: int, whence: int = 0) -> int:
        return self._raw.seek(off, whence)

    def tell(self) -> int:
        return self._raw.tell()


_CACHE: dict[tuple[Any, ...], ElfInfo | None] = {}


def read_elf(path: Path | str) -> ElfInfo | None:
    """ELF facts of one file, from its headers; None for a file that is not ELF.

    A file that starts like ELF but cannot be parsed raises AssembleError: a
    truncated library in a runtime is a real fault, not "not a library".
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise AssembleError(f"cannot read ({exc.strerror})", where=str(path), fix="check the path", code=FAILED) from None
    key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _CACHE:
        return _CACHE[key]
    info = _parse(path, st.st_size)
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = info
    return info


def _parse(path: Path, size: int) -> ElfInfo | None:
    try:
        raw = open(path, "rb", buffering=64 * 1024)  # noqa: SIM115 -- closed by `with raw` below
    except OSError as exc:
        raise AssembleError(f"cannot open ({exc.strerror})", where=str(path), fix="check permissions", code=FAILED) from None
    with raw:
        if raw.read(4) != ELF_MAGIC:
            return None
        raw.seek(0)
        stream = _CountingReader(raw)
        try:
            elf = ELFFile(cast(BinaryIO, stream))   # it reads, seeks and tells only
            return _facts(elf, path, size, stream)
        except Exception as exc:  # noqa: BLE001 -- pyelftools/construct raise many types on a corrupt file
            raise AssembleError(f"not a readable ELF file ({type(exc).__name__}: {exc})", where=str(path),
                                fix="the file is truncated or corrupt: rebuild or re-download it", code=FAILED) from None


def _split_path(value: str) -> tuple[str, ...]:
    return tuple(value.split(":")) if value else ()


# Dynamic tags read here (values from elf.h); pyelftools' structs name them.
_DF_1_NODEFLIB = 0x800


def _facts(elf: ELFFile, path: Path, size: int, stream: _CountingReader) -> ElfInfo:
    """Walk program headers -> PT_DYNAMIC -> tags -> strings, touching only those bytes.

    pyelftools' section objects are not used: building them parses whole hash
    tables (hundreds of KiB on libLLVM), and a stripped file may have none.
    """
    phdr, dyn_struct = elf.structs.Elf_Phdr, elf.structs.Elf_Dyn
    loads, dynamic, interp = [], None, None
    for i in range(elf.num_segments()):
        h = struct_parse(phdr, cast(BinaryIO, stream), elf["e_phoff"] + i * elf["e_phentsize"])
        if h["p_type"] == "PT_LOAD":
            loads.append((h["p_vaddr"], h["p_filesz"], h["p_offset"]))
        elif h["p_type"] == "PT_DYNAMIC":
            dynamic = (h["p_offset"], h["p_filesz"])
        elif h["p_type"] == "PT_INTERP":
            stream.seek(h["p_offset"])
            interp = stream.read(h["p_filesz"]).split(b"\0", 1)[0].decode("utf-8", "replace")

    def offset_of(addr: int) -> int:
        for vaddr, filesz, off in loads:
            if vaddr <= addr < vaddr + filesz:
                return int(addr - vaddr + off)
        raise ValueError(f"address {addr:#x} lies in no PT_LOAD segment")

    tags: list[tuple[str, int]] = []
    if dynamic is not None:
        off, filesz = dynamic
        step = dyn_struct.sizeof()
        stream.seek(off)
        table = stream.read(filesz)
        for pos in range(0, len(table) - step + 1, step):
            d = dyn_struct.parse(table[pos:pos + step])
            if d["d_tag"] == "DT_NULL":
                break
            tags.append((d["d_tag"], d["d_val"]))
    first = dict(reversed(tags))
    strtab = offset_of(first["DT_STRTAB"]) if "DT_STRTAB" in first else None

    def string(at: int) -> str:
        if strtab is None:
            raise ValueError("dynamic section without DT_STRTAB")
        return _cstring(stream, strtab + at)

    needed = tuple(string(v) for t, v in tags if t == "DT_NEEDED")
    soname = string(first["DT_SONAME"]) if "DT_SONAME" in first else None
    rpath = _split_path(string(first["DT_RPATH"])) if "DT_RPATH" in first else ()
    runpath = _split_path(string(first["DT_RUNPATH"])) if "DT_RUNPATH" in first else ()
    nodeflib = bool(first.get("DT_FLAGS_1", 0) & _DF_1_NODEFLIB)
    verneed = ()
    if "DT_VERNEED" in first:
        verneed = _verneed(elf, stream, offset_of(first["DT_VERNEED"]), first.get("DT_VERNEEDNUM", 0), string)
    return ElfInfo(
        path=path, elf_class=elf.elfclass, machine=elf["e_machine"], etype=elf["e_type"],
        soname=soname, needed=needed, rpath=rpath, runpath=runpath, interpreter=interp,
        nodeflib=nodeflib, version_needs=verneed, size=size, bytes_read=stream.count)


def _cstring(stream: _CountingReader, offset: int) -> str:
    stream.seek(offset)
    buf = b""
    while True:
        chunk = stream.read(256)
        if not chunk:
            break
        nul = chunk.find(b"\0")
        if nul >= 0:
            buf += chunk[:nul]
            break
        buf += chunk
    return buf.decode("utf-8", "replace")


def _verneed(elf: ELFFile, stream: _CountingReader, offset: int, count: int, string: Callable[[int], str]) -> tuple[Any, ...]:
    """GNU version needs (DT_VERNEED): which symbol versions each library must provide."""
    vn, vna = elf.structs.Elf_Verneed, elf.structs.Elf_Vernaux
    out = []
    for _ in range(count or 4096):
        need = struct_parse(vn, cast(BinaryIO, stream), offset)
        names, aux = [], offset + need["vn_aux"]
        for _ in range(need["vn_cnt"]):
            a = struct_parse(vna, cast(BinaryIO, stream), aux)
            names.append(string(a["vna_name"]))
            if not a["vna_next"]:
                break
            aux += a["vna_next"]
        out.append((string(need["vn_file"]), tuple(names)))
        if not need["vn_next"]:
            break
        offset += need["vn_next"]
    return tuple(out)


def section_strings(path: Path | str, pattern: bytes, sections: Sequence[str] = (".rodata",),
                    limit: int = 64 << 20) -> tuple[str, ...]:
    """Printable strings matching a regex inside the named sections (not the whole file).

    Used for what a library names but does not link: the versioned data folder
    Debian patches into rocBLAS, the comgr soname HIP dlopens. A section larger
    than `limit` is skipped rather than read.
    """
    rx = re.compile(pattern)
    found: list[str] = []
    with open(path, "rb") as f:
        if f.read(4) != ELF_MAGIC:
            return ()
        f.seek(0)
        try:
            elf = ELFFile(f)
            for name in sections:
                sec = elf.get_section_by_name(name)
                if sec is None or sec["sh_type"] == "SHT_NOBITS" or sec["sh_size"] > limit:
                    continue
                f.seek(sec["sh_offset"])
                data = f.read(sec["sh_size"])
                for m in rx.finditer(data):
                    s = m.group(0).decode("ascii", "replace")
                    if s not in found:
                        found.append(s)
        except ELFError as exc:
            raise AssembleError(f"not a readable ELF file ({exc})", where=str(path),
                                fix="the file is truncated or corrupt", code=FAILED) from None
    return tuple(found)


# --- lookup ------------------------------------------------------------------

def _expand(entry: str, obj: ElfInfo) -> Path | None:
    """One RPATH/RUNPATH entry with $ORIGIN, $LIB, $PLATFORM expanded.

    An empty entry means "the current directory" to ld.so; a plan must not
    depend on where it runs, so it is dropped here (verify flags it).
    """
    if not entry:
        return None
    lib = "lib64" if obj.elf_class == 64 else "lib"
    platform = _PLATFORM.get(obj.machine, "")
    out = entry
    for token, value in (("ORIGIN", str(obj.origin())), ("LIB", lib), ("PLATFORM", platform)):
        out = out.replace("${" + token + "}", value).replace("$" + token, value)
    # not normalised: ld.so keeps "bin/../lib" as written, and it is that path $ORIGIN sees
    return Path(out) if out.startswith("/") else None


def expand_dirs(entries: Sequence[str], obj: ElfInfo) -> tuple[Path, ...]:
    out = []
    for e in entries:
        d = _expand(e, obj)
        if d is not None and d not in out:
            out.append(d)
    return tuple(out)


@lru_cache(maxsize=8)
def ldconfig_dirs(conf: str = "/etc/ld.so.conf") -> tuple[Path, ...]:
    """Directories ldconfig puts into ld.so.cache, in file order (includes followed)."""
    out: list[Path] = []
    seen: set[str] = set()

    def parse(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
        except OSError:
            return
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("hwcap "):
                continue
            if line.startswith("include "):
                for pat in line.split()[1:]:
                    if not pat.startswith("/"):
                        pat = str(Path(path).parent / pat)
                    for inc in sorted(glob.glob(pat)):
                        parse(inc)
                continue
            for d in re.split(r"[\s:,]+", line):
                if d.startswith("/") and Path(d) not in out:
                    out.append(Path(d))

    parse(conf)
    return tuple(out)


def system_dirs(obj: ElfInfo) -> tuple[Path, ...]:
    """ld.so's built-in search path for this class/machine (multiarch first, as Debian builds it)."""
    triplet = _TRIPLETS.get(obj.machine)
    dirs = []
    if triplet:
        dirs += [f"/lib/{triplet}", f"/usr/lib/{triplet}"]
    if obj.elf_class == 64:
        dirs += ["/lib64", "/usr/lib64"]
    dirs += ["/lib", "/usr/lib"]
    return tuple(Path(d) for d in dirs)


@dataclass(frozen=True)
class Lookup:
    """Where a NEEDED name resolved, through which step, and what was passed over on the way."""
    name: str
    path: Path | None                 # as found (dir + name), not symlink-resolved
    via: str | None                   # rpath | ld_library_path | runpath | extra | ldconfig | system | direct
    rejected: tuple[tuple[Path, str], ...] = ()
    searched: tuple[tuple[str, Path], ...] = field(default=(), repr=False)


def _candidate_problem(cand: Path, requester: ElfInfo) -> str | None:
    if "stubs" in cand.parts or "stubs" in cand.resolve().parts:
        return "a link-time stub (stubs/): it fails at run time"
    try:
        info = read_elf(cand)
    except AssembleError:
        return "an unreadable ELF file"
    if info is None:
        return "not an ELF file"
    if info.elf_class != requester.elf_class or info.machine != requester.machine:
        return f"wrong class ({info.elf_class}-bit {info.machine}, requester is {requester.elf_class}-bit {requester.machine})"
    return None


def search_order(requester: ElfInfo, *, loaders: Sequence[ElfInfo] = (), extra_dirs: Sequence[Path] = (),
                 ld_library_path: str | None = None) -> list[tuple[str, Path]]:
    """The directories ld.so tries for a NEEDED of `requester`, in order, each tagged with its step.

    `loaders`: the objects that caused `requester` to be loaded, nearest first,
    ending at the executable (empty: the requester was loaded directly).
    `ld_library_path`: None for an empty environment.
    """
    steps: list[tuple[str, Path]] = []
    if not requester.runpath:
        chain = [requester, *loaders]
        for obj in chain:
            for d in expand_dirs(obj.search_rpath, obj):
                steps.append(("rpath", d))
    if ld_library_path:
        for entry in ld_library_path.replace(";", ":").split(":"):
            if entry.startswith("/"):
                steps.append(("ld_library_path", Path(entry)))
    for d in expand_dirs(requester.runpath, requester):
        steps.append(("runpath", d))
    for d in extra_dirs:
        steps.append(("extra", Path(d)))
    if not requester.nodeflib:
        for d in ldconfig_dirs():
            steps.append(("ldconfig", d))
        for d in system_dirs(requester):
            steps.append(("system", d))
    return steps


def lookup(needed: str, requester: ElfInfo, *, loaders: Sequence[ElfInfo] = (), extra_dirs: Sequence[Path] = (),
           ld_library_path: str | None = None) -> Lookup:
    if "/" in needed:  # a path NEEDED is opened as written (relative to the cwd: never in a runtime)
        p = Path(needed)
        ok = p.is_absolute() and p.is_file() and _candidate_problem(p, requester) is None
        return Lookup(needed, p if ok else None, "direct" if ok else None)
    rejected: list[tuple[Path, str]] = []
    steps = search_order(requester, loaders=loaders, extra_dirs=extra_dirs, ld_library_path=ld_library_path)
    tried: set[Path] = set()
    for via, d in steps:
        cand = d / needed
        if cand in tried:
            continue
        tried.add(cand)
        if not cand.is_file():
            continue
        problem = _candidate_problem(cand, requester)
        if problem:
            rejected.append((cand, problem))
            continue
        return Lookup(needed, cand, via, tuple(rejected), tuple(steps))
    return Lookup(needed, None, None, tuple(rejected), tuple(steps))


def resolve(needed: str, requester: ElfInfo, *, extra_dirs: Sequence[Path] = (), loaders: Sequence[ElfInfo] = (),
            ld_library_path: str | None = None) -> Path | None:
    """Where ld.so would find `needed` for `requester` (empty environment unless ld_library_path is given)."""
    return lookup(needed, requester, loaders=loaders, extra_dirs=extra_dirs, ld_library_path=ld_library_path).path


def symlink_chain(path: Path) -> tuple[list[str], Path]:
    """Names from `path` through each symlink hop to the real file: (["libx.so.1", "libx.so.1.2"], real)."""
    names = [path.name]
    cur = path if path.is_absolute() else Path.cwd() / path
    for _ in range(40):
        if not cur.is_symlink():
            return names, cur
        cur = cur.parent / os.readlink(cur)      # "a/../b" stays unresolved: "a" may be a symlink
        names.append(cur.name)
    raise AssembleError("symlink loop", where=str(path), fix="repair the library's symlinks", code=FAILED)


# --- dynamic symbols ------------------------------------------------------------

_SHDR64 = struct.Struct("<IIQQQQIIQQ")
_SYM64 = struct.Struct("<IBBHQQ")
_SHT_DYNSYM = 11
_STB_GLOBAL, _STB_WEAK = 1, 2
_STV_DEFAULT, _STV_PROTECTED = 0, 3


def dynamic_symbols(path: Path | str) -> tuple[set[str], set[str]]:
    """(defined and exported, undefined) global/weak names of .dynsym.

    Read as two blocks and unpacked in one pass: pyelftools builds an object per symbol
    (0.8 s for a repair's 19 ggml files). Files that are not little-endian ELF64 go
    through pyelftools. Raises ELFError or OSError on a damaged file.
    """
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != ELF_MAGIC:
            raise ELFError("not an ELF file")
        if head[4] != 2 or head[5] != 1:
            return _dynamic_symbols_slow(f)
        e_shoff, = struct.unpack_from("<Q", head, 0x28)
        e_shentsize, e_shnum = struct.unpack_from("<HH", head, 0x3A)
        if e_shentsize != _SHDR64.size or not e_shoff:
            return _dynamic_symbols_slow(f)
        tables = _dynsym(f, e_shoff, e_shnum)
    if tables is None:
        return set(), set()
    syms, names = tables
    defined, undefined = set(), set()
    for st_name, st_info, st_other, st_shndx, _, _ in _SYM64.iter_unpack(syms):
        if not st_name or (st_info >> 4) not in (_STB_GLOBAL, _STB_WEAK):
            continue
        end = names.find(b"\0", st_name)
        name = names[st_name:end if end >= 0 else len(names)].decode("utf-8", "replace")
        if st_shndx == 0:
            undefined.add(name)
        elif (st_other & 3) in (_STV_DEFAULT, _STV_PROTECTED):
            defined.add(name)
    return defined, undefined


def _dynsym(f: BinaryIO, e_shoff: int, e_shnum: int) -> tuple[bytes, bytes] | None:
    """.dynsym's entries (whole ones only) and its string table, read with struct from a
    little-endian ELF64 file; None when it has no .dynsym. Raises ELFError on a damaged table."""
    f.seek(e_shoff)
    table = f.read(e_shnum * _SHDR64.size)
    if len(table) < e_shnum * _SHDR64.size:
        raise ELFError("section header table truncated")
    headers = [_SHDR64.unpack_from(table, i * _SHDR64.size) for i in range(e_shnum)]
    dynsym = next((h for h in headers if h[1] == _SHT_DYNSYM), None)
    if dynsym is None:
        return None
    if dynsym[6] >= e_shnum or dynsym[9] != _SYM64.size:
        raise ELFError(".dynsym has a bad string table link or entry size")
    strtab = headers[dynsym[6]]
    f.seek(dynsym[4])
    syms = f.read(dynsym[5])
    f.seek(strtab[4])
    names = f.read(strtab[5])
    if len(syms) < dynsym[5] or len(names) < strtab[5]:
        raise ELFError("dynamic symbol table truncated")
    return syms[:len(syms) // _SYM64.size * _SYM64.size], names


def _dynamic_symbols_slow(f: BinaryIO) -> tuple[set[str], set[str]]:
    defined, undefined = set(), set()
    f.seek(0)
    sec = ELFFile(f).get_section_by_name(".dynsym")
    for sym in (sec.iter_symbols() if isinstance(sec, SymbolTableSection) else ()):
        if not sym.name or sym["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
            continue
        if sym["st_shndx"] == "SHN_UNDEF":
            undefined.add(sym.name)
        elif sym["st_other"]["visibility"] in ("STV_DEFAULT", "STV_PROTECTED"):
            defined.add(sym.name)
    return defined, undefined


# --- code of exported functions (read, never run) -------------------------------------


class ElfCode:
    """The bytes of a shared object's exported functions, by symbol and by address: what a few
    tiny functions compile to is a fact about the file that holds for any host (nothing is run).
    Little-endian ELF64 only (ELFError otherwise); headers and .dynsym read with struct, as
    dynamic_symbols does (pyelftools takes ~70 ms per CPU module)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        head = f.read(64)
        if len(head) < 64 or head[:4] != ELF_MAGIC or head[4] != 2 or head[5] != 1:
            raise ELFError("not a little-endian ELF64 file")
        e_phoff, e_shoff = struct.unpack_from("<QQ", head, 0x20)
        e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", head, 0x36)
        if e_phentsize != _PHDR64.size or e_shentsize != _SHDR64.size:
            raise ELFError("unexpected header sizes")
        f.seek(e_phoff)
        table = f.read(e_phnum * _PHDR64.size)
        if len(table) < e_phnum * _PHDR64.size:
            raise ELFError("program header table truncated")
        phdrs = [_PHDR64.unpack_from(table, i * _PHDR64.size) for i in range(e_phnum)]
        self._loads = [(p[3], p[5], p[2]) for p in phdrs if p[0] == _PT_LOAD]      # vaddr, filesz, offset
        self._symbols: dict[str, int] = {}
        tables = _dynsym(f, e_shoff, e_shnum)
        if tables is None:
            return
        syms, names = tables
        for st_name, st_info, _, st_shndx, st_value, _ in _SYM64.iter_unpack(syms):
            if st_name and st_shndx != 0 and (st_info & 0xF) == _STT_FUNC:
                end = names.find(b"\0", st_name)
                self._symbols[names[st_name:end if end >= 0 else len(names)].decode("utf-8", "replace")] = st_value

    def address(self, name: str) -> int | None:
        """Where the exported function `name` starts (None: not exported here)."""
        return self._symbols.get(name)

    def read(self, address: int, length: int) -> bytes:
        """Up to `length` bytes of the file image at `address` (b"" when no segment holds it)."""
        for vaddr, size, offset in self._loads:
            if vaddr <= address < vaddr + size:
                self._f.seek(offset + address - vaddr)
                return self._f.read(min(length, vaddr + size - address))
        return b""


_PHDR64 = struct.Struct("<IIQQQQQQ")
_PT_LOAD = 1
_STT_FUNC = 2


def read_code(path: Path | str, use: Callable[[ElfCode], T]) -> T | None:
    """use(ElfCode) of the file; None for a file that is not a readable ELF file (the ELF checks
    name a damaged one)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != ELF_MAGIC:
                return None
            f.seek(0)
            return use(ElfCode(f))
    except Exception:  # noqa: BLE001 -- pyelftools/construct raise many types on a corrupt file
        return None
