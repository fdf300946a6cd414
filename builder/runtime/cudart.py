"""The CUDA runtime version a libcudart holds, read from its code (nothing is run).

NVIDIA's PyPI wheels ship `libcudart.so.12` / `.so.13` with no minor in the name, and the
library holds no version string. What it does hold is cudaRuntimeGetVersion(), which calls a
small function that checks its pointer, stores the version as a constant and returns cudaSuccess:

    48 85 ff 74 ..   testq %rdi, %rdi; je <cudaErrorInvalidValue>
    c7 07 <int32>    movl $CUDART_VERSION, (%rdi)     (12080 for 12.8, 13000 for 13.0)
    31 c0 c3         xorl %eax, %eax; ret

Read that way from the 12.8.90 wheel (12080), the 13.5.37 wheel (13050) and the 13.0 toolkit
(13000); each value is what calling cudaRuntimeGetVersion() returns for the same file.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the ELF reader is imported where a file is read: the CLI starts without it
    from builder.runtime.elf import ElfCode

ENTRY = "cudaRuntimeGetVersion"
# [endbr64] [testq %rdi,%rdi; je ...] movl $imm32,(%rdi); xorl %eax,%eax; ret
_STORE = re.compile(rb"(?:\xf3\x0f\x1e\xfa)?(?:\x48\x85\xff\x74.)?\xc7\x07(.{4})\x31\xc0\xc3", re.S)
_CALL = 0xE8
_ENTRY_BYTES = 256               # the calls come within the first ~0x60 bytes in every file read


def _version(code: ElfCode) -> str | None:
    start = code.address(ENTRY)
    if start is None:
        return None
    body = code.read(start, _ENTRY_BYTES)
    found = set()
    for i in range(len(body) - 4):
        if body[i] != _CALL:
            continue
        target = start + i + 5 + struct.unpack_from("<i", body, i + 1)[0]
        if m := _STORE.match(code.read(target, 16)):
            value = struct.unpack("<i", m.group(1))[0]
            if 1000 <= value < 100000 and value % 10 == 0:    # CUDART_VERSION: 1000 * major + 10 * minor
                found.add(value)
    if len(found) != 1:
        return None
    value = found.pop()
    return f"{value // 1000}.{value % 1000 // 10}"


def runtime_version(path: Path | str) -> str | None:
    """"12.8" for a libcudart of CUDA 12.8; None when its code does not say (not a libcudart,
    damaged, or a build whose code this reading does not know)."""
    from builder.runtime.elf import read_code
    return read_code(path, _version)
