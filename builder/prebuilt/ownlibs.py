"""One ggml per runtime: llama.cpp's own libraries (libggml*, libllama*, libmtmd* and whatever else
exports ggml, gguf or llama symbols) come from the inputs only, never from a --lib-path folder, an
input's other folders or the host.

Two ggml bases in one process load without a word and then split the backend registry: a module
linked against the other base registers there, and llama-server lists no device for it. So a
file carried from a later input (backend modules only) must need the first input's libraries by
their own SONAME, and the bundle plan may hold no vendor library that is llama.cpp's; each
refusal names both files and where they came from.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError

from builder.errors import AssembleError
from builder.prebuilt import origins
from builder.prebuilt.discover import OWN_LIBRARY
from builder.runtime.bundle import BundlePlan, VendorPlan
from builder.runtime.elf import dynamic_symbols, lookup, read_elf
from builder.runtime.layout import OwnFile

_OWN_EXPORT = re.compile(r"^(ggml|gguf|llama|mtmd)_")
_FIX = "llama.cpp's own libraries come only from the inputs, never from --lib-path or the host"


@dataclass(frozen=True)
class Sources:
    """Where a library can come from, in the user's words: the inputs and the --lib-path folders."""
    inputs: tuple[origins.Unpacked, ...]
    lib_paths: tuple[Path, ...]

    def whence(self, path: Path) -> str:
        """`path` and where it lies: an input's file, a --lib-path folder's, or the host's."""
        if any(path.is_relative_to(u.root) for u in self.inputs):
            return origins.origin(self.inputs, path)
        for d in self.lib_paths:
            if path.is_relative_to(d) or path.resolve().is_relative_to(d.resolve()):
                return f"{path} (in the --lib-path folder {d})"
        return f"{path} (on this host)"


@dataclass(frozen=True)
class Carried:
    """One own file to carry, with the input it came from (index 0: the base input)."""
    file: OwnFile
    index: int


def identity_name(lib: OwnFile) -> str:
    """The name ld.so knows a library by: its SONAME, or its file name when it has none."""
    info = read_elf(lib.source)
    return (info.soname if info and info.soname else None) or lib.source.name


def _stem(name: str) -> str:
    return name.split(".so", 1)[0]


def check_needs(carried: Sequence[Carried], libraries: Sequence[OwnFile], base_input: str, sources: Sources,
                search: Sequence[Path]) -> None:
    """Every llama.cpp library a carried file needs is one the base input carries: a later input's file
    by the library's SONAME exactly (the name its own build linked it with); the base input's by any
    name the library has in the runtime. Refused naming the file, the library it needs, the base
    input's library and, when one is found elsewhere (`search`: --lib-path, the inputs' folders, the
    host), that other file."""
    by_identity = {identity_name(lib): lib for lib in libraries}
    any_name = {n: lib for lib in libraries for n in (lib.source.name, *lib.links)} | by_identity
    for c in carried:
        info = read_elf(c.file.source)
        for needed in (info.needed if info else ()):
            if not OWN_LIBRARY.match(needed) or needed in (by_identity if c.index else any_name):
                continue
            ours = next((lib for name, lib in by_identity.items() if _stem(name) == _stem(needed)), None)
            theirs = f"{sources.whence(ours.source)} (SONAME {identity_name(ours)})" if ours \
                else "no library of that name"
            found = lookup(needed, info, extra_dirs=search).path if info else None
            other = (f"; the {needed} at {sources.whence(found)} is not the base input's, and "
                     "llama.cpp's own libraries come only from the inputs") if found else ""
            raise AssembleError(
                f"needs {needed}, but the base input {base_input} carries {theirs}{other}",
                where=sources.whence(c.file.source),
                fix=f"take {c.file.source.name} from the same build as {base_input} (its files need "
                    f"{identity_name(ours) if ours else needed}), or give that build whole as the first input")


def _why_ours(v: VendorPlan) -> str | None:
    """Why a library the bundler found outside the inputs is llama.cpp's (None: a vendor's)."""
    for name in (v.soname, v.real.name):
        if OWN_LIBRARY.match(name):
            return f"{name} is llama.cpp's by name"
    try:
        defined, _ = dynamic_symbols(v.real)
    except (ELFError, OSError, struct.error, ValueError):
        return None                   # damaged: the bundler's and verify's checks say so
    own = sorted(s for s in defined if _OWN_EXPORT.match(s))
    return f"it exports llama.cpp's symbols ({', '.join(own[:3])}{' ...' if len(own) > 3 else ''})" if own else None


def check_vendor(bundle: BundlePlan, sources: Sources, shown: Callable[[str], str]) -> None:
    """No vendor library of the plan is llama.cpp's (a second ggml base, libllama from elsewhere).
    shown: a runtime path (bin/libggml-vulkan.so) as the user knows the file carried there."""
    for v in bundle.vendor:
        why = _why_ours(v)
        if why:
            who = ", ".join(shown(n) for n in v.needed_by)
            raise AssembleError(f"{who} needs {v.soname}, found only at {sources.whence(v.source)}: {why}, and "
                                f"{_FIX}", where="assemble repair",
                                fix="give the input that holds it (the same build as the base input), or take "
                                    "that file from the same build as the base input")
