"""Does each `libggml-cpu-<level>.so` hold the code its name says? Read from the file, so it holds
for levels this CPU cannot run and under `verify --static`.

ggml's CPU module exports ggml_cpu_has_avx2() and its kin (ggml-cpu.c), each `return 1` or
`return 0` by the compiler's own macros: the module's statement of what it was compiled with,
the same one its backend's get_features reports. Compiled, each is one of

    [endbr64] b8 01 00 00 00 c3     movl $1, %eax; ret
    [endbr64] 31 c0 c3              xorl %eax, %eax; ret

(read in the 14 modules of assemble's cpu build and of Debian's libggml0 0.27.0; at -O0 the
same between pushq %rbp; movq %rsp,%rbp and popq %rbp, with movl $0 for 0). A module that
reports other features than its level's (the x64 build copied over libggml-cpu-zen4.so) is
loaded by ggml as zen4 would be, scores as zen4 on a CPU that has zen4's features, and runs
x64 code: full speed lost in silence. One that does not report at all is not a ggml CPU module.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.check.report import FAIL, PASS, Check
from builder.config import cpulevels
from builder.runtime.elf import ElfCode, read_code

NAME = "CPU levels"
PREFIX = "ggml_cpu_has_"
HINT = "each libggml-cpu-<level>.so must be that level's build: take bin/ whole from one build"
# [endbr64] [pushq %rbp; movq %rsp,%rbp (-O0)] movl $1|$0, %eax or xorl %eax,%eax [popq %rbp] ret
_RETURNS = re.compile(rb"(?:\xf3\x0f\x1e\xfa)?(\x55\x48\x89\xe5)?(?:\xb8([\x00\x01])\x00\x00\x00|\x31\xc0)"
                      rb"(?(1)\x5d)\xc3", re.S)


def _report(code: ElfCode) -> frozenset[str] | str:
    on = set()
    for name, feature in cpulevels.SELF_REPORT.items():
        start = code.address(PREFIX + name)
        if start is None:
            return f"it does not export {PREFIX}{name}(): not a ggml CPU module"
        m = _RETURNS.match(code.read(start, 24))
        if m is None:
            return f"its {PREFIX}{name}() is not a constant return: what it was compiled with cannot be read"
        if m.group(2) == b"\x01":
            on.add(feature)
    return frozenset(on)


def compiled_features(module: Path) -> frozenset[str] | str:
    """The GGML_<feature> names (cpulevels.SELF_REPORT) the module says it was compiled with, or
    why it says nothing readable (one line)."""
    features = read_code(module, _report)
    return "not a readable ELF file" if features is None else features


def describe(features: frozenset[str]) -> str:
    level = next((lv.name for lv in cpulevels.LEVELS if lv.reported() == features), None)
    names = " ".join(f for f in cpulevels.FEATURES if f in features) or "nothing beyond SSE2"
    return f"{names} (the {level} level)" if level else names


def cpu_level_check(runtime: Path) -> Check | None:
    """None when the runtime has no named CPU levels (the CPU backend linked in, or one module)."""
    runtime = Path(runtime)
    folder = runtime / "bin"
    found = sorted(p.name for p in folder.glob("libggml-cpu-*.so")) if folder.is_dir() else []
    named = [(n, lv) for n in found if (v := cpulevels.variant_of(n)) and (lv := cpulevels.level(v))]
    if not named:
        return None
    wrong = []
    for name, level in named:
        features = compiled_features(runtime / "bin" / name)
        if isinstance(features, str):
            wrong.append(f"{name}: {features}")
        elif features != level.reported():
            wrong.append(f"{name} was compiled with {describe(features)}, not {level.name}'s "
                         f"{describe(level.reported())}")
    if wrong:
        more = f" (+{len(wrong) - 2} more)" if len(wrong) > 2 else ""
        return Check(NAME, FAIL, "; ".join(wrong[:2]) + more, HINT)
    which = f"each of the {len(named)} libggml-cpu-<level>.so" if len(named) > 1 else named[0][0]
    return Check(NAME, PASS, f"{which} reports its level's instruction sets (its ggml_cpu_has_*())")
