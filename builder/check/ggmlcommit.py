"""Which llama.cpp commit a runtime's ggml was built from, read from libggml-base's code.

ggml's CMake compiles the tree's `git rev-parse --short HEAD` into libggml-base as GGML_COMMIT
("0c1e570", "-dirty" appended when the tree was patched; "unknown" without git), and ggml.c
exports it as `const char * ggml_commit(void) { return GGML_COMMIT; }`. Compiled, that is one
instruction and a return (read in assemble's cpu build and in Debian's libggml-base.so.0.27.0):

    [endbr64] 48 8d 05 <disp32> c3        leaq disp(%rip), %rax; ret

so the string sits at the address after the lea plus disp: read from the file, never run. In a
llama.cpp tree ggml is a folder of the same repository, so that commit is llama.cpp's.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.runtime.elf import ElfCode, read_code

SYMBOL = "ggml_commit"
_ENDBR64 = b"\xf3\x0f\x1e\xfa"
_LEA_RAX_RIP = b"\x48\x8d\x05"
COMMIT_RE = re.compile(r"([0-9a-f]{7,40})(-dirty)?")


def _string(code: ElfCode) -> str | None:
    start = code.address(SYMBOL)
    if start is None:
        return None
    head = code.read(start, 16)
    at = len(_ENDBR64) if head.startswith(_ENDBR64) else 0
    if head[at:at + 3] != _LEA_RAX_RIP or head[at + 7:at + 8] != b"\xc3":
        return None
    target = start + at + 7 + int.from_bytes(head[at + 3:at + 7], "little", signed=True)
    raw = code.read(target, 64).split(b"\0", 1)
    if len(raw) < 2:
        return None
    try:
        return raw[0].decode("ascii")
    except UnicodeDecodeError:
        return None


def built_from(base: Path) -> str | None:
    """The short commit hash libggml-base was built from (without "-dirty"); None when the file does
    not say (no git at build time: "unknown", another compiler's code, not ggml's base)."""
    text = read_code(base, _string)
    m = COMMIT_RE.fullmatch(text) if text else None
    return m.group(1) if m else None
