"""From unpacked Windows release zips to the list of files one runtime folder needs.

Upstream ships one zip per backend (llama-b7416-bin-win-cuda-12.4-x64.zip, ...-win-vulkan-x64.zip)
plus the CUDA runtime alone (cudart-llama-bin-win-cuda-12.4-x64.zip); each backend zip repeats the
executables and the ggml base. The first input that has a ggml base gives the executables, the base
and its libraries; each later one adds the backend modules the first lacks; any input may supply
DLLs those need (the cudart zip). Everything carried is reached from the executables and modules
through their PE import tables: never a hand list. A DLL is left to the host only by the policy
(builder/data/windows.toml), with its reason; one that no input carries and the policy does not
name refuses the repair, before anything is copied.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import AssembleError
from builder.prebuilt.inputs import Input
from builder.windows import ARCH
from builder.windows.pe import PeFile, is_pe, read_pe
from builder.windows.policy import HostRule, host_rule

BASE = "ggml-base.dll"
LOADER = "ggml.dll"                        # holds ggml's backend loader (ggml-backend-reg.cpp)
_MODULE = re.compile(r"ggml-([a-z0-9]+)(?:-[a-z0-9_]+)?\.dll")
_OWN = re.compile(r"(lib)?(ggml|llama|mtmd)[a-z0-9_-]*\.dll|[^/]*\.exe")     # mingw names them libllama.dll


def module_backend(name: str) -> str | None:
    """ggml-cuda.dll -> cuda, ggml-cpu-haswell.dll -> cpu; None for the base, the loader and the rest."""
    m = _MODULE.fullmatch(name.lower())
    return m.group(1) if m and name.lower() != BASE else None


def role(name: str) -> str:
    """own: llama.cpp's files (executables, [lib]ggml*, [lib]llama*, [lib]mtmd*); vendor: everything else."""
    return "own" if _OWN.fullmatch(name.lower()) else "vendor"


@dataclass(frozen=True)
class WinPart:
    """One input, unpacked: its PE files by lower-cased name."""
    input: Input
    root: Path
    files: dict[str, PeFile]
    build: str | None

    @property
    def base(self) -> PeFile | None:
        return self.files.get(BASE)

    def executables(self, targets: Sequence[str]) -> list[PeFile]:
        wanted = {t.lower().removesuffix(".exe") for t in targets}
        return [f for n, f in sorted(self.files.items()) if n.endswith(".exe")
                and (n.removesuffix(".exe") in wanted if wanted else n.startswith("llama-"))]

    def modules(self) -> list[PeFile]:
        return [f for n, f in sorted(self.files.items()) if module_backend(n)]


def read_part(inp: Input, root: Path) -> WinPart:
    """Every PE file under root (upstream's zips are flat; a name twice in one input is refused)."""
    files: dict[str, PeFile] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                       and p.suffix.lower() in (".exe", ".dll")):
        if not is_pe(path):
            continue
        key = path.name.lower()
        if key in files:
            raise AssembleError(f"{path.name} is in this input twice ({files[key].path.relative_to(root)} and "
                                f"{path.relative_to(root)})", where=inp.given,
                                fix="give an archive with one copy of each DLL, as upstream's zips are")
        files[key] = read_pe(path)
    if not files:
        raise AssembleError("no Windows executable or DLL in it", where=inp.given,
                            fix="give upstream's Windows release zips (llama-bNNNN-bin-win-*-x64.zip)")
    return WinPart(inp, root, files, inp.build)


@dataclass(frozen=True)
class Carried:
    name: str                  # as the input spells it: the runtime keeps that spelling
    source: Path
    role: str
    input: str                 # the input it came from, as given


@dataclass(frozen=True)
class HostDll:
    name: str
    rule: HostRule
    needed_by: tuple[str, ...]


@dataclass(frozen=True)
class WinPlan:
    parts: tuple[WinPart, ...]
    carried: tuple[Carried, ...]
    host: tuple[HostDll, ...]
    contributed: dict[str, Any]                      # input given -> backends taken from it
    left_out: tuple[str, ...]              # driver DLLs an input shipped, not carried (why: the policy)


def interface(pe: PeFile) -> str:
    return hashlib.sha256("\n".join(sorted(pe.exports)).encode()).hexdigest()


def describe_base(part: WinPart) -> str:
    base = part.base
    if base is None:
        return "no ggml base (libraries only)"
    return (f"ggml base{(' ' + part.build) if part.build else ''}, {len(base.exports)} exported symbols "
            f"(interface {interface(base)[:12]})")


def _same_base(first: WinPart, other: WinPart) -> str | None:
    a, b = first.base, other.base
    if a is None or b is None:
        return None
    if interface(a) != interface(b):
        return "their exported interfaces differ"
    if first.build and other.build and first.build != other.build:
        return f"their build tags differ ({first.build} vs {other.build})"
    return None


def plan(parts: Sequence[WinPart], targets: Sequence[str] = ()) -> WinPlan:
    """What the runtime folder holds, and what it leaves to the host; refusals before any copy."""
    first = next((p for p in parts if p.base is not None), None)
    if first is None:
        raise AssembleError(f"no input holds {BASE}", where=parts[0].input.given,
                            fix="give a backend zip of upstream's (llama-bNNNN-bin-win-<backend>-x64.zip) first")
    for other in parts:
        if other is not first and (why := _same_base(first, other)):
            raise AssembleError(f"{first.input.given} and {other.input.given} carry different ggml bases: {why} "
                                f"({describe_base(first)} vs {describe_base(other)})", where=other.input.given,
                                fix="merge zips of one build (the same bNNNN); backends of two ggml versions "
                                    "cannot share a process")
    executables = first.executables(targets)
    if not executables:
        raise AssembleError("no llama-*.exe in it" if not targets else f"none of {', '.join(targets)} in it",
                            where=first.input.given, fix="give the zip with the executables first, or name "
                                                         "existing ones with --target")
    provided = set(first.base.exports) if first.base else set()
    if LOADER in first.files:
        provided |= first.files[LOADER].exports
    carried: dict[str, Carried] = {}
    contributed: dict[str, list[str]] = {}
    start: list[tuple[PeFile, WinPart]] = [(e, first) for e in executables]
    first_backends = {module_backend(m.path.name) for m in first.modules()}
    for part in [first] + [p for p in parts if p is not first]:
        for m in part.modules():
            backend = module_backend(m.path.name)
            assert backend is not None           # modules() are the files module_backend names
            if m.path.name.lower() in carried or (part is not first and backend in first_backends):
                continue               # the first input's own modules win; a later one adds what it lacks
            lacking = sorted((m.imported_from(BASE) | m.imported_from(LOADER)) - provided)
            if lacking:
                raise AssembleError(f"{m.path.name} from {part.input.given} was built against another ggml base: it "
                                    f"needs {', '.join(lacking[:4])}{' ...' if len(lacking) > 4 else ''}, which "
                                    f"{BASE} of {first.input.given} does not export",
                                    where=f"{part.input.given}: {m.path.name}",
                                    fix="take the module from the same build as the base")
            carried[m.path.name.lower()] = Carried(m.path.name, m.path, "own", part.input.given)
            start.append((m, part))
            contributed.setdefault(part.input.given, [])
            if backend not in contributed[part.input.given]:
                contributed[part.input.given].append(backend)
    for e in executables:
        carried[e.path.name.lower()] = Carried(e.path.name, e.path, "own", first.input.given)
    host: dict[str, tuple[HostRule, list[str]]] = {}
    pool = [first] + [p for p in parts if p is not first]
    queue = list(start)
    while queue:
        pe, owner = queue.pop(0)
        where = f"{owner.input.given}: {pe.path.name}"           # the input as the user named it
        if pe.machine != ARCH:
            raise AssembleError(f"{pe.path.name} is built for {pe.machine}, not {ARCH}", where=where,
                                fix="use the x64 release zips; one process cannot load DLLs of two architectures")
        for dll in pe.imports:
            key = dll.lower()
            if key in carried:
                continue
            rule = host_rule(dll)
            holder = next((p for p in pool if key in p.files), None)
            if rule and (rule.kind != "redist" or holder is None):
                host.setdefault(key, (rule, []))[1].append(pe.path.name)
                continue
            if holder is None:
                raise AssembleError(f"{pe.path.name} imports {dll}, which no input carries and which is not a "
                                    "Windows or driver DLL", where=where,
                                    fix=f"add the zip that ships {dll} (for CUDA builds: upstream's "
                                        "cudart-llama-bin-win-cuda-<version>-x64.zip)")
            dep = holder.files[key]
            carried[key] = Carried(dep.path.name, dep.path, role(dep.path.name), holder.input.given)
            queue.append((dep, holder))
    left_out = sorted({f.path.name for p in parts for n, f in p.files.items()
                       if (r := host_rule(n)) and r.kind == "driver"})
    return WinPlan(tuple(parts), tuple(sorted(carried.values(), key=lambda c: c.name.lower())),
                   tuple(HostDll(n, r, tuple(sorted(set(by)))) for n, (r, by) in sorted(host.items())),
                   contributed, tuple(left_out))
