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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder.runtime.elf import section_strings

_ABSOLUTE = rb"/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)+"
_NOT_A_FOLDER = re.compile(r"\.(c|cc|cpp|cxx|h|hpp|cu|cuh|m|mm|comp|glsl|metal|inc)\Z|^/(proc|sys|dev)/")


@dataclass(frozen=True)
class LoaderFacts:
    library: str                      # the file the loader is in (libggml.so.0.9.4)
    backend_dirs: tuple[str, ...]     # compiled-in GGML_BACKEND_DIR (normally zero or one)

    def as_dict(self) -> dict:
        return {"library": self.library, "backend_dirs": list(self.backend_dirs)}


PREFIX_MIN = 16          # a shorter common prefix ("/usr/lib/") proves nothing


def loader_facts(libggml: Path, install_dirs: tuple[str, ...] = ()) -> LoaderFacts:
    """install_dirs: absolute folders the input put its modules in (e.g. /usr/lib/<triplet>/ggml/backends0)."""
    whole = [s for s in section_strings(libggml, _ABSOLUTE + rb"(?=\x00)") if not _NOT_A_FOLDER.search(s)]
    runs = section_strings(libggml, _ABSOLUTE) if install_dirs else ()
    inline = [d for d in install_dirs if any(len(r) >= PREFIX_MIN and d.startswith(r) for r in runs)]
    return LoaderFacts(libggml.name, tuple(dict.fromkeys(whole + inline)))


def host_modules_in(folder: str) -> tuple[str, ...]:
    """Backend modules installed on this host in a compiled-in folder (what the runtime would load)."""
    d = Path(folder)
    try:
        return tuple(sorted(p.name for p in d.iterdir() if p.name.startswith("libggml-") and p.name.endswith(".so")))
    except OSError:
        return ()
