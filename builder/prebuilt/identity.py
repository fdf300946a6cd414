"""Whether prebuilt parts can share one process: one ggml base, and modules built against it.

ggml's backend modules call into libggml-base (tensors, buffers, the registry); a module built
against another base can load and then corrupt memory on its first graph. Without the source,
what proves two bases are the same ABI is what they are and what they export: the version in
the file name (libggml-base.so.0.9.4), the upstream build tag when the input names one, and the
set of exported dynamic symbols. A module is checked the other way round: every ggml/gguf
symbol it imports must be exported by the base it will run with.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError

from builder.errors import AssembleError
from builder.runtime.elf import dynamic_symbols, read_elf

_VERSION = re.compile(r"\.so\.(\d+(?:\.\d+)*)\Z")
_GGML_SYMBOL = re.compile(r"^(ggml|gguf)_")


@dataclass(frozen=True)
class BaseIdentity:
    file: str                         # libggml-base.so.0.9.4
    version: str | None               # 0.9.4
    build: str | None                 # b7416, when the input says
    interface: str                    # sha256 of the sorted exported symbol names
    exported: int                     # how many
    soname: str | None = None         # libggml-base.so.0: the name every file of its build needs it by

    def describe(self) -> str:
        parts = [f"ggml {self.version or 'version unknown'}"] + ([self.build] if self.build else [])
        return f"{' '.join(parts)}, {self.exported} exported symbols (interface {self.interface[:12]})"


def _dynsym(path: Path) -> tuple[set[str], set[str]]:
    """(defined and exported, undefined) dynamic symbol names."""
    try:
        return dynamic_symbols(path)
    except (ELFError, OSError, struct.error) as exc:
        raise AssembleError(f"cannot read its dynamic symbols ({exc})", where=str(path),
                            fix="the file is damaged: fetch the input again") from None


def exported(path: Path) -> set[str]:
    return _dynsym(path)[0]


def base_identity(path: Path, build: str | None = None) -> BaseIdentity:
    names = exported(path)
    m = _VERSION.search(path.name)
    info = read_elf(path)
    return BaseIdentity(path.name, m.group(1) if m and m.group(1).count(".") >= 1 else None, build,
                        hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest(), len(names),
                        info.soname if info else None)


def same_base(a: BaseIdentity, b: BaseIdentity) -> str | None:
    """Why two bases differ (None: the same ABI as far as files can tell)."""
    if a.interface != b.interface:
        return "their exported interfaces differ"
    if a.version and b.version and a.version != b.version:
        return f"their versions differ ({a.version} vs {b.version})"
    if a.build and b.build and a.build != b.build:
        return f"their build tags differ ({a.build} vs {b.build})"
    if (a.soname or a.file) != (b.soname or b.file):
        return f"their SONAMEs differ ({a.soname or a.file} vs {b.soname or b.file})"
    return None


def missing_imports(module: Path, provided: set[str]) -> list[str]:
    """The ggml/gguf symbols a module imports that the base (and libggml) it will run with lack."""
    return sorted(s for s in _dynsym(module)[1] if _GGML_SYMBOL.match(s) and s not in provided)
