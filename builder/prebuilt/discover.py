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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.digest import sha256_file
from builder.errors import AssembleError
from builder.runtime.elf import ElfInfo, read_elf
from builder.runtime.layout import OwnFile, is_ggml_loader, module_backend, own_file

SKIP_DIRS = {"CMakeFiles", ".git", "__pycache__", "share", "include", "doc"}   # never hold what a runtime runs
EXECUTABLE_PREFIXES = ("llama-",)
# llama.cpp's own libraries (ggml, llama, mtmd, the tools' -impl.so); any other library an input
# holds (Debian's libgomp1 or ROCm packages given alongside) is a vendor library the bundler takes
# from the input's folders, with the vendor policy, never as ours.
OWN_LIBRARY = re.compile(r"^lib(ggml|llama|mtmd)([-.]|\Z)")
BASE_PREFIX = "libggml-base.so"


@dataclass(frozen=True)
class Found:
    """One input, read."""
    root: Path
    executables: tuple[OwnFile, ...]
    libraries: tuple[OwnFile, ...]    # only those the executables and modules need
    modules: tuple[OwnFile, ...]
    left_out: tuple[str, ...]         # libraries found but needed by nothing carried (relative to root)

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


def _elf(path: Path) -> ElfInfo | None:
    if path.is_symlink() or not path.is_file() or path.suffix in (".o", ".a", ".py", ".txt", ".json", ".h"):
        return None
    try:
        return read_elf(path)
    except AssembleError:
        return None                   # a damaged file the closure will name if anything needs it


def discover(root: Path, targets: Sequence[str] = ()) -> Found:
    """targets: executable names to carry (default: every llama-* executable found)."""
    root = Path(root)
    files = _walk(root)
    links: dict[str, list[str]] = {}
    for p in files:
        if p.is_symlink():
            real = os.path.realpath(p)
            if real.startswith(str(root.resolve()) + os.sep):
                links.setdefault(real, []).append(p.name)
    exes: dict[str, Path] = {}
    libs: dict[str, tuple[Path, ElfInfo]] = {}      # soname (or file name) -> the real file
    mods: dict[str, Path] = {}
    for p in files:
        info = _elf(p)
        if info is None or info.etype not in ("ET_DYN", "ET_EXEC"):
            continue
        if info.is_program and p.name.startswith(EXECUTABLE_PREFIXES):
            _once(exes, p.name, p)
        elif module_backend(p.name):
            _once(mods, p.name, p)
        elif OWN_LIBRARY.match(p.name) and not info.is_program:
            _library(libs, info.soname or p.name, p, info)
    if targets:
        missing = [t for t in targets if t not in exes]
        if missing:
            raise AssembleError(f"no executable {', '.join(missing)} in this input", where=str(root),
                                fix=f"name one of: {', '.join(sorted(exes)) or '(none found)'}")
        exes = {t: exes[t] for t in targets}
    if not exes:
        raise AssembleError("no llama.cpp executable (llama-*) found", where=str(root),
                            fix="give a build folder, a release archive or the packages that hold llama-server")
    needed = _closure([read_elf(p) for p in [*exes.values(), *mods.values()]], libs)
    own_libs = []
    for name in needed:
        path, info = libs[name]
        names = {*links.get(str(path.resolve()), []), name} - {path.name}
        own_libs.append(own_file(path, "library", tuple(sorted(names))))
    left = tuple(sorted(str(p.relative_to(root)) for n, (p, _) in libs.items() if n not in needed))
    return Found(root, tuple(own_file(p, "executable") for p in exes.values()), tuple(own_libs),
                 tuple(own_file(p, "module") for p in mods.values()), left)


def _once(seen: dict[str, Path], name: str, path: Path) -> None:
    """The same name twice in one input: identical copies are one file; different ones are refused."""
    if name in seen and sha256_file(seen[name]) != sha256_file(path):
        raise AssembleError(f"two different files named {name}: {seen[name]} and {path}", where=str(path.parent),
                            fix="give one build at a time (a folder holding two builds is two inputs)")
    seen.setdefault(name, path)


def _library(libs: dict, soname: str, path: Path, info: ElfInfo) -> None:
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


def _closure(starts: list[ElfInfo | None], libs: dict) -> list[str]:
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
