"""What a prebuilt ggml's backend loader will do, read from the binary (it cannot be patched).

ggml's loader (ggml_backend_load_best, ggml-backend-reg.cpp) scans, in order, the folder
compiled in as GGML_BACKEND_DIR (Debian: /usr/lib/<triplet>/ggml/backends0), the executable's
folder, then the working directory, and keeps the highest-scoring module of each backend; on
a tie the first found wins. So a prebuilt with a compiled-in folder loads a module installed
there on the host before, or instead of, the runtime's own; and an unpatched loader runs a
module planted in the working directory.

Finding the compiled-in folder: in a plain build it is a NUL-terminated absolute folder path
among libggml's read-only strings (the rest are source file names and /proc/self/exe). GCC may
instead build the std::string inline: Debian's libggml.so.0.27.0 holds only the first 32 bytes,
"/usr/lib/x86_64-linux-gnu/ggml/b", in .rodata (no NUL) and the tail "ackends0" as an
instruction's immediate. So a folder the input installs its modules in (Debian:
/usr/lib/x86_64-linux-gnu/ggml/backends0) counts as compiled in when a run of libggml's
.rodata is a long prefix of it; verified by running Debian's llama-server in a sid chroot with
the same module in both folders: the compiled-in one was loaded.

Whether it searches the working directory: ggml's loader learns it from
std::filesystem::current_path(), its only use in libggml (ggml-backend-reg.cpp); assemble's
backend-loader-no-cwd patch removes that search, and with it the import. So a libggml that
imports no way to read the working directory cannot search it (Debian's libggml.so.0.27.0 and
an unpatched build import current_path; the patched build imports none: read from the files,
and the planted-module check of verify proves the same by running).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elftools.common.exceptions import ELFError

from builder.errors import FAILED, AssembleError
from builder.runtime.elf import dynamic_symbols, section_strings

_ABSOLUTE = rb"/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)+"
LOADER_PATCH = "backend-loader-no-cwd"    # patches/backend-loader-no-cwd.toml: the search is shared code
# What reads the working directory: libstdc++'s std::filesystem::current_path (mangled; on Windows
# exported by libstdc++-6.dll), MSVC's STL (__std_fs_get_current_path), libc and Win32.
READS_CWD = re.compile(r"current_path|^__std_fs_get_current_path\Z|^GetCurrentDirectory[AW]\Z|^getcwd\Z|"
                       r"^get_current_dir_name\Z")
_NOT_A_FOLDER = re.compile(r"\.(c|cc|cpp|cxx|h|hpp|cu|cuh|m|mm|comp|glsl|metal|inc)\Z|^/(proc|sys|dev)/")


@dataclass(frozen=True)
class LoaderFacts:
    library: str                      # the file the loader is in (libggml.so.0.9.4)
    backend_dirs: tuple[str, ...]     # compiled-in GGML_BACKEND_DIR (normally zero or one)
    reads_cwd: tuple[str, ...] = ()   # what it imports to read the working directory (none: cannot search it)

    def as_dict(self) -> dict[str, Any]:
        return {"library": self.library, "backend_dirs": list(self.backend_dirs), "reads_cwd": list(self.reads_cwd)}


PREFIX_MIN = 16          # a shorter common prefix ("/usr/lib/") proves nothing


def loader_facts(libggml: Path, install_dirs: tuple[str, ...] = ()) -> LoaderFacts:
    """install_dirs: absolute folders the input put its modules in (e.g. /usr/lib/<triplet>/ggml/backends0)."""
    whole = [s for s in section_strings(libggml, _ABSOLUTE + rb"(?=\x00)") if not _NOT_A_FOLDER.search(s)]
    runs = section_strings(libggml, _ABSOLUTE) if install_dirs else ()
    inline = [d for d in install_dirs if any(len(r) >= PREFIX_MIN and d.startswith(r) for r in runs)]
    return LoaderFacts(libggml.name, tuple(dict.fromkeys(whole + inline)), cwd_readers(libggml))


@dataclass(frozen=True)
class CwdReading:
    """How a libggml can learn the working directory, as its dynamic symbols tell it."""
    imported: tuple[str, ...]     # what it imports for that, readable (none, and not linked in: cannot search it)
    linked_in: bool               # it defines std::filesystem::current_path itself: libstdc++'s filesystem code
                                  # is linked in (-static-libstdc++, or as the cuda-vulkan build on the H200 host,
                                  # Ubuntu 24.04 with g++ 13.3, linked it), and that copy imports getcwd
                                  # whether or not ggml's loader ever calls it

    @property
    def readers(self) -> tuple[str, ...]:
        return self.imported + (("std::filesystem::current_path (linked in)",) if self.linked_in else ())


def cwd_reading(libggml: Path) -> CwdReading:
    """AssembleError on a damaged file, as section_strings."""
    try:
        defined, undefined = dynamic_symbols(libggml)
    except (ELFError, OSError) as exc:
        raise AssembleError(f"not a readable ELF file ({exc})", where=str(libggml),
                            fix="the file is truncated or corrupt", code=FAILED) from None
    return CwdReading(tuple(sorted({readable(n) for n in undefined if READS_CWD.search(n)})),
                      any(_LINKED_IN_CWD.match(n) for n in defined))


# libstdc++'s own std::filesystem::current_path() and current_path(error_code&), defined in the library
_LINKED_IN_CWD = re.compile(r"_ZNSt10filesystem12current_path(B5cxx11)?(Ev|ERSt10error_code)\Z")


def cwd_readers(libggml: Path) -> tuple[str, ...]:
    """The ways this libggml can learn the working directory, readable (none: its loader cannot search it).
    AssembleError on a damaged file, as section_strings."""
    return cwd_reading(libggml).readers


def readable(symbol: str) -> str:
    """std::filesystem::current_path for libstdc++'s mangled names; others as they are."""
    return "std::filesystem::current_path" if symbol.startswith("_ZNSt10filesystem") and "current_path" in symbol \
        else symbol


def host_modules_in(folder: str) -> tuple[str, ...]:
    """Backend modules installed on this host in a compiled-in folder (what the runtime would load)."""
    d = Path(folder)
    try:
        return tuple(sorted(p.name for p in d.iterdir() if p.name.startswith("libggml-") and p.name.endswith(".so")))
    except OSError:
        return ()
