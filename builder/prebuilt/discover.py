"""What a prebuilt llama.cpp holds: its executables, its ggml base, its libraries and its backend
modules, found by reading ELF headers in an unpacked input (a CMake build folder, an upstream
release archive, Debian's packages), never from a list of names.

Layouts differ: a CMake build puts everything in bin/; upstream's Linux archives are one flat
folder (build/bin/) of regular files, often a versioned library and its SONAME as two copies;
Debian splits /usr/bin (thin executables), /usr/lib/<triplet> (libraries, the tools' -impl.so)
and /usr/lib/<triplet>/ggml/backends0 (modules). Only what the executables and modules need is
carried; the rest is reported as left out.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError

from builder.config import cpulevels
from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.runtime.elf import ElfInfo, dynamic_symbols, read_elf
from builder.runtime.layout import (BACKEND_OPS, TESTS_DIR, OwnFile, is_ggml_loader, module_backend,
                                   module_links_in_tests, own_file)

SKIP_DIRS = {"CMakeFiles", ".git", "__pycache__", "share", "include", "doc"}   # never hold what a runtime runs
EXECUTABLE_PREFIXES = ("llama-",)
# llama.cpp's own libraries (ggml, llama, mtmd, the tools' -impl.so); any other library an input
# holds (Debian's libgomp1 or ROCm packages given alongside) is a vendor library the bundler takes
# from the input's folders, with the vendor policy, never as ours.
OWN_LIBRARY = re.compile(r"^lib(ggml|llama|mtmd)([-.]|\Z)")
BASE_PREFIX = "libggml-base.so"
# What only llama.cpp's code names: a file importing or exporting these is ours whatever its name.
_OWN_SYMBOL = re.compile(r"^(ggml|gguf|llama)_")
_NOT_BINARY = (".o", ".a", ".py", ".txt", ".json", ".h")
WITHOUT = "--without"


@dataclass(frozen=True)
class LeftOut:
    """A file of an input that looks like llama.cpp's and is not carried, and why."""
    path: Path
    reason: str


@dataclass(frozen=True)
class Found:
    """One input, read."""
    root: Path
    executables: tuple[OwnFile, ...]
    libraries: tuple[OwnFile, ...]    # only those the executables and modules need
    modules: tuple[OwnFile, ...]
    left_out: tuple[LeftOut, ...]     # every other file that is llama.cpp's by name or by ELF identity
    names: frozenset[str] = frozenset()   # executable and module file names seen (what --without may name)
    tests: tuple[OwnFile, ...] = ()   # test-backend-ops (upstream's archives: beside llama-server; a runtime: tests/)

    @property
    def base(self) -> OwnFile | None:
        return next((f for f in self.libraries if f.source.name.startswith(BASE_PREFIX)), None)

    @property
    def ggml(self) -> OwnFile | None:
        """libggml.so: the library that holds ggml's backend loader."""
        return next((f for f in self.libraries if is_ggml_loader(f.source.name)), None)


def _walk(root: Path) -> list[Path]:
    out = []
    for dirpath, dirs, names in os.walk(root):      # never follows a symlinked folder
        # a runtime made earlier (its manifest.json) or being made (.assembling-) is output, not input
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and ".assembling-" not in d
                         and not (Path(dirpath) / d / "manifest.json").is_file())
        out += [Path(dirpath) / n for n in sorted(names)]
    return out


def named_kind(name: str) -> str | None:
    """What a file is by its name: "executable" (llama-*), "module" (libggml-<backend>*.so), "library"
    (libggml*, libllama*, libmtmd* .so) or None."""
    if name.startswith(EXECUTABLE_PREFIXES) and "." not in name:
        return "executable"
    if module_backend(name):
        return "module"
    if OWN_LIBRARY.match(name) and ".so" in name:
        return "library"
    return None


def cut_short(path: Path) -> str | None:
    """Why an ELF64 file whose headers parse is still incomplete: a segment or its section headers
    lie past the end (a truncated download keeps the headers at the front). None when whole."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            size = os.fstat(f.fileno()).st_size
            if len(head) < 64 or head[4] != 2 or head[5] != 1:
                return None               # not little-endian ELF64: left to the header parser
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            ends = [shoff + shentsize * shnum] if shnum else []
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            if len(table) < phentsize * phnum or phentsize < 56:
                return f"cut inside its program headers ({size} bytes)"
            for i in range(phnum):
                ptype, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if ptype == 1:            # PT_LOAD
                    ends.append(offset + filesz)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    need = max(ends, default=0)
    return f"truncated: {size} bytes, its headers describe {need}" if need > size else None


def _elf(path: Path) -> tuple[ElfInfo | None, str | None]:
    """(ELF facts, why it is damaged); (None, None) for a file that is not ELF or not a candidate."""
    if path.is_symlink() or not path.is_file() or path.suffix in _NOT_BINARY:
        return None, None
    try:
        info = read_elf(path)
    except AssembleError as exc:
        return None, f"damaged: {exc.what}"
    if info is None:
        return None, None
    return info, cut_short(path)


def _speaks_ggml(path: Path) -> tuple[bool, str | None]:
    """(whether it imports or exports any ggml/gguf/llama symbol, why it cannot be read)."""
    try:
        defined, undefined = dynamic_symbols(path)
    except (ELFError, OSError, struct.error, ValueError) as exc:
        return False, f"damaged: cannot read its dynamic symbols ({exc})"
    return any(_OWN_SYMBOL.match(s) for s in (*defined, *undefined)), None


def _needs_own(info: ElfInfo) -> str | None:
    return next((n for n in info.needed if OWN_LIBRARY.match(n)), None)


def _problem(path: Path, kind: str, info: ElfInfo | None, damage: str | None) -> str | None:
    """Why an executable or a module by name cannot be carried (None: it is llama.cpp's and whole)."""
    if damage:
        return damage
    if info is None:
        return "a script, not a program" if kind == "executable" and _text_head(path).startswith(b"#!") \
            else "not an ELF file"
    if kind == "module" and (info.etype != "ET_DYN" or info.is_program):
        return "not a shared library"
    if kind == "executable" and not info.is_program:
        return "not a program"
    if kind == "executable" and _needs_own(info):
        return None
    ours, unreadable = _speaks_ggml(path)
    if unreadable:
        return unreadable
    if not ours:
        return ("not llama.cpp's: it needs no ggml or llama library and imports or exports no ggml symbol"
                if kind == "executable" else "not a ggml backend module: it imports or exports no ggml symbol")
    return None


def _text_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(256)
    except OSError:
        return b""


def _library_problem(path: Path, info: ElfInfo | None, damage: str | None) -> str | None:
    """Why a library named as llama.cpp's is not one (None for a whole library, and for a linker
    script, which names the real one)."""
    if damage:
        return damage
    if info is None:
        head = _text_head(path)
        return None if b"GNU ld script" in head or b"GROUP" in head or b"INPUT" in head else "not an ELF file"
    if info.is_program or info.etype != "ET_DYN":
        return "not a shared library"
    if info.soname and not OWN_LIBRARY.match(info.soname):
        return f"not llama.cpp's: its SONAME is {info.soname}"
    return None


class _Sorted:
    """Each file of an input put in its place: carried (executables, libraries by SONAME, modules),
    left out with why, or refused unless --without names it."""

    def __init__(self, root: Path, targets: Sequence[str], without: Collection[str]):
        self.real_root = os.path.realpath(root)
        self.targets, self.without = targets, without
        self.links: dict[str, list[str]] = {}           # real file -> names linking to it inside the input
        self.exes: dict[str, Path] = {}
        self.libs: dict[str, tuple[Path, ElfInfo]] = {}  # soname (or file name) -> the real file
        self.mods: dict[str, Path] = {}
        self.tests: dict[str, Path] = {}
        self.left: list[LeftOut] = []
        self.refused: list[tuple[Path, str]] = []       # (file, why)
        self.damaged_libs: dict[Path, str] = {}
        self.names: set[str] = set()                    # executable and module names seen

    def take(self, p: Path) -> None:
        kind = named_kind(p.name)
        if p.name == BACKEND_OPS:
            self._test(p)
            return
        if kind in ("executable", "module"):
            self.names.add(p.name)
            if p.name in self.without:
                self.left.append(LeftOut(p, WITHOUT))
                return
        if p.is_symlink():
            self._link(p, kind)
            return
        info, damage = _elf(p)
        if kind in ("executable", "module"):
            if p.is_file():
                self._own(p, kind, _problem(p, kind, info, damage))
        elif kind == "library" and (why := _library_problem(p, info, damage)):
            self.damaged_libs[p] = why
        elif info is None or info.etype not in ("ET_DYN", "ET_EXEC"):
            return
        elif kind == "library" and not info.is_program:
            _library(self.libs, info.soname or p.name, p, info)
        elif (own := _needs_own(info)) is not None:
            self.left.append(LeftOut(p, f"not a llama-* executable or a backend module; it needs {own}"))

    def _test(self, p: Path) -> None:
        """test-backend-ops: carried to tests/ when whole and llama.cpp's; anything else about it is only
        information (a runtime works without it)."""
        self.names.add(p.name)
        if p.name in self.without:
            self.left.append(LeftOut(p, WITHOUT))
        elif p.is_symlink() or not p.is_file():
            self.left.append(LeftOut(p, "a symlink, not the program"))
        elif why := _problem(p, "executable", *_elf(p)):
            self.left.append(LeftOut(p, why))
        elif p.name in self.tests:
            self.left.append(LeftOut(p, f"{self.tests[p.name]} is carried"))
        else:
            self.tests[p.name] = p

    def _link(self, p: Path, kind: str | None) -> None:
        real = os.path.realpath(p)
        inside = real.startswith(self.real_root + os.sep)
        if kind == "module" and inside and p.parent.name == TESTS_DIR \
                and module_links_in_tests([p.name])[0][1] == os.readlink(p):
            return                    # a runtime's tests/ view of its own bin/ module: made again, never carried
        if inside:
            self.links.setdefault(real, []).append(p.name)
        if kind and not inside:
            why = f"a symlink leaving the input (to {real})"
            (self.left.append(LeftOut(p, why)) if kind == "library" else self.refused.append((p, why)))
        elif kind == "module":
            self.refused.append((p, (f"a symlink (to {os.path.relpath(real, os.path.dirname(p))}): a backend module "
                                     "is carried as its own file")))
        elif kind == "executable":
            self.left.append(LeftOut(p, f"a symlink to {os.path.relpath(real, os.path.dirname(p))}"))

    def _own(self, p: Path, kind: str, why: str | None) -> None:
        if why and kind == "executable" and ((self.targets and p.name not in self.targets)
                                             or why.startswith("a script")):
            self.left.append(LeftOut(p, why))           # not wanted (or not a program at all): listed
        elif why:
            self.refused.append((p, why))
        else:
            _once(self.exes if kind == "executable" else self.mods, p.name, p)


def discover(root: Path, targets: Sequence[str] = (), without: Collection[str] = (), *,
             executables_required: bool = True, shown: Callable[[Path], str] = str) -> Found:
    """targets: executable names to carry (default: every llama-* executable found); without: executable
    and module file names the user leaves out. A later input may hold only backend modules
    (executables_required=False). shown: how a file is named to the user.

    Every file that is llama.cpp's by name or ELF identity is carried or left out with a reason. A
    damaged, foreign or escaping module or wanted executable, and an incomplete set of CPU variants,
    are refused (naming the file) unless the user leaves them out with --without."""
    root = Path(root)
    got = _Sorted(root, targets, without)
    for p in _walk(root):
        got.take(p)
    exes, libs, mods, left, links = got.exes, got.libs, got.mods, got.left, got.links
    refused, damaged_libs = got.refused, got.damaged_libs
    if refused:
        path, why = refused[0]
        raise AssembleError(why, where=shown(path), fix="restore it from the same build, or leave it out on "
                                                        f"purpose with {WITHOUT} {path.name}")
    if targets:
        missing = [t for t in targets if t not in exes]
        if missing:
            raise AssembleError(f"no executable {', '.join(missing)} in this input", where=shown(root),
                                fix=f"name one of: {', '.join(sorted(exes)) or '(none found)'}")
        left += [LeftOut(p, "not named by --target") for n, p in exes.items() if n not in targets]
        exes = {t: exes[t] for t in targets}
    if not exes and (executables_required or not mods):
        aside = sorted(x.path.name for x in left if named_kind(x.path.name) == "executable")
        raise AssembleError(("no llama.cpp executable (llama-*) found" if executables_required
                             else "no llama.cpp executable (llama-*) or backend module found")
                            + (f" (left out: {', '.join(aside)})" if aside else ""), where=shown(root),
                            fix="give a build folder, a release archive or the packages that hold llama-server"
                            if executables_required else "a later input adds backend modules (libggml-<backend>.so)")
    _cpu_levels_complete(mods, without, shown(root))
    starts = [read_elf(p) for p in [*exes.values(), *mods.values(), *got.tests.values()]]
    needed = _closure(starts, libs)
    wanted = {n: info.path for info in [*starts, *(libs[x][1] for x in needed)] if info for n in info.needed}
    resolved = set(libs) | {p.name for p, _ in libs.values()}
    _damaged_needed(damaged_libs, set(wanted), resolved, links, shown)
    absent = sorted(n for n in wanted if OWN_LIBRARY.match(n) and n not in resolved)
    if absent and executables_required:       # a later input's modules take the first input's libraries
        raise AssembleError(f"{absent[0]} (needed by {wanted[absent[0]].name}) is not in this input", where=shown(root),
                            fix="give the whole build (or every package of it): llama.cpp's own libraries come "
                                "from the input, never from the host")
    own_libs = []
    for name in needed:
        path, _info = libs[name]
        link_names = {*links.get(str(path.resolve()), []), name} - {path.name}
        own_libs.append(own_file(path, "library", tuple(sorted(link_names))))
    left += [LeftOut(p, "nothing carried needs it") for n, (p, _) in libs.items() if n not in needed]
    left += [LeftOut(p, f"{why}; nothing carried needs it") for p, why in damaged_libs.items()]
    left = sorted(left, key=lambda x: str(x.path))
    return Found(root, tuple(own_file(p, "executable") for p in exes.values()), tuple(own_libs),
                 tuple(own_file(p, "module") for p in mods.values()), tuple(left), frozenset(got.names),
                 tuple(own_file(p, "test") for p in got.tests.values()))


def cpu_level_files() -> tuple[str, ...]:
    """The CPU variant modules a GGML_CPU_ALL_VARIANTS build declares, lowest level first."""
    return tuple(f"libggml-cpu-{lv.name}.so" for lv in cpulevels.LEVELS)


def _cpu_levels_complete(mods: dict[str, Path], without: Collection[str], where: str) -> None:
    """All x86 variants or none: ggml's loader picks the best that runs, so a missing level is a
    CPU without a CPU backend (x64 is the only one for CPUs without SSE4.2)."""
    present = {n for n in mods if cpulevels.variant_of(n) in cpulevels.BY_NAME}
    if not present:
        return                        # a single-level build (libggml-cpu.so) or another architecture's set
    missing = [n for n in cpu_level_files() if n not in present and n not in without]
    if missing:
        lowest = cpulevels.variant_of(missing[0])
        raise AssembleError(f"{', '.join(missing)} missing from the CPU variants ({len(present)} of "
                            f"{len(cpulevels.LEVELS)} that ggml builds): a CPU whose best level is {lowest} would "
                            "have no CPU backend", where=where,
                            fix=f"give the input with every libggml-cpu-*.so of the build, or leave the level out on "
                                f"purpose with {WITHOUT} {missing[0]}")


def _damaged_needed(damaged: dict[Path, str], wanted: set[str], resolved: set[str], links: dict[str, Any],
                    shown: Callable[[Path], str]) -> None:
    """A damaged library that something carried needs (by its file name or a link to it) and that no
    whole copy provides is refused."""
    for path, why in damaged.items():
        aliases = {path.name, *links.get(os.path.realpath(path), [])}
        if any(n in wanted and n not in resolved for n in aliases):
            raise AssembleError(why, where=shown(path),
                                fix="restore it from the same build (a library the executables or modules need "
                                    "cannot be left out)")


def _once(seen: dict[str, Path], name: str, path: Path) -> None:
    """The same name twice in one input: identical copies are one file; different ones are refused."""
    if name in seen and sha256_file(seen[name]) != sha256_file(path):
        raise AssembleError(f"two different files named {name}: {seen[name]} and {path}", where=str(path.parent),
                            fix="give one build at a time (a folder holding two builds is two inputs)")
    seen.setdefault(name, path)


def _library(libs: dict[str, Any], soname: str, path: Path, info: ElfInfo) -> None:
    """Upstream's archives hold libggml.so.0.9.4 and libggml.so.0 as two copies: one library, the
    most versioned file name kept and the other names made links."""
    if soname in libs:
        kept, _ = libs[soname]
        if sha256_file(kept) != sha256_file(path):
            raise AssembleError(f"two different files claim SONAME {soname}: {kept} and {path}",
                                where=str(path.parent), fix="give one build at a time")
        if len(path.name) <= len(kept.name):
            return
    libs[soname] = (path, info)


def _closure(starts: list[ElfInfo | None], libs: dict[str, Any]) -> list[str]:
    """The libraries of this input that the starting files need, directly or through each other."""
    by_file = {p.name: s for s, (p, _) in libs.items()}
    todo = [n for info in starts if info for n in info.needed]
    needed: list[str] = []
    while todo:
        n = todo.pop(0)
        name = n if n in libs else by_file.get(n)
        if name is None or name in needed:
            continue
        needed.append(name)
        todo += list(libs[name][1].needed)
    return needed
