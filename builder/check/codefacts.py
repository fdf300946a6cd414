"""The manifest's facts about the code a runtime carries, against that code (builder.check.facts runs them):

  gpu_targets.hip    the gfx archs bin/libggml-hip.so carries (static.hip_archs, as verify's code check reads them)
  gpu_targets.cuda   the SASS and PTX of bin/libggml-cuda*.so (cudacode): "90" both, "90-real" SASS only,
                     "90-virtual" PTX only, as CMake's CUDA_ARCHITECTURES asks nvcc for them
  gpu_runtimes       gpuruntime.describe of the same files, as build and repair call it
  CPU modules        every bin/libggml-cpu-*.so ggml's loader would try is a level ggml builds
                     (config.cpulevels), and a single libggml-cpu.so's recorded GGML_<ISA> defines are
                     what its code says it was compiled with (cpulevel.compiled_features), since
                     verify's CPU check judges this CPU by them
"""

from __future__ import annotations

from pathlib import Path

from builder.check.cpulevel import compiled_features, describe
from builder.check.cpuvariant import single_level_features
from builder.check.libfacts import Files
from builder.check.static import hip_archs
from builder.config import cpulevels
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError
from builder.runtime.cudacode import read_cuda_code
from builder.runtime.gpuruntime import describe as describe_gpus
from builder.runtime.layout import BIN_DIR
from builder.runtime.manifest import Manifest

HIP_MODULE = f"{BIN_DIR}/libggml-hip.so"
CPU_PREFIX = "libggml-cpu"


def problems(files: Files, m: Manifest) -> list[str]:
    return _hip(files, m) + _cuda(files, m) + _gpu_runtimes(files, m) + _cpu(files, m)


def _hip(files: Files, m: Manifest) -> list[str]:
    stated = {GfxTarget.parse(t).arch for t in m.gpu_targets.hip}      # the reader checked the grammar
    module = files.runtime / HIP_MODULE
    if not module.is_file():
        return [f"gpu_targets.hip: {', '.join(m.gpu_targets.hip)}, but there is no {HIP_MODULE} to carry their code"] \
            if stated else []
    archs, compressed = hip_archs(module)
    if not archs and compressed:
        return []                     # compressed bundles: the archs cannot be read here ('hip code objects' says so)
    # Every stated target has code; the module may carry more (a repair's --hip-target narrows the runtime to
    # the cards its ROCm data was pruned to), but a module's code never goes unstated.
    if not stated <= archs or (archs and not stated):
        return [(f"gpu_targets.hip: {', '.join(m.gpu_targets.hip) or 'none'}, but {HIP_MODULE} carries code for "
                f"{', '.join(sorted(archs)) or 'no gfx arch'}")]
    return []


def carried_cuda(sass: set[str], ptx: set[str]) -> set[str]:
    """The CUDA_ARCHITECTURES entries that give exactly these code objects."""
    out = set()
    for arch in {n.removeprefix("sm_") for n in sass} | {n.removeprefix("compute_") for n in ptx}:
        both = f"sm_{arch}" in sass and f"compute_{arch}" in ptx
        out.add(arch if both else f"{arch}-real" if f"sm_{arch}" in sass else f"{arch}-virtual")
    return out


def cuda_code(modules: list[Path]) -> tuple[set[str], set[str]] | None:
    """The SASS (sm_90) and PTX (compute_90) the CUDA modules carry; None when one cannot be read (the
    'CUDA code' check names it). Repair records what this finds, verify reads it back: one reading."""
    sass: set[str] = set()
    ptx: set[str] = set()
    for module in modules:
        try:
            code = read_cuda_code(module)
        except AssembleError:
            return None
        if code is not None:
            sass |= set(code.sass)
            ptx |= set(code.ptx)
    return sass, ptx


def _cuda(files: Files, m: Manifest) -> list[str]:
    stated = {str(CudaArch.parse(t)) for t in m.gpu_targets.cuda}
    modules = sorted(p for p in files.elf if p.startswith(f"{BIN_DIR}/libggml-cuda") and p.endswith(".so"))
    if not modules:
        return [(f"gpu_targets.cuda: {', '.join(m.gpu_targets.cuda)}, but there is no {BIN_DIR}/libggml-cuda.so to "
                "carry their code")] if stated else []
    code = cuda_code([files.runtime / rel for rel in modules])
    if code is None:
        return []                     # a damaged module: the 'CUDA code' check names it
    sass, ptx = code
    found = carried_cuda(sass, ptx)
    if stated != found:
        return [(f"gpu_targets.cuda: {', '.join(m.gpu_targets.cuda) or 'none'}, but {', '.join(modules)} carry "
                f"{', '.join(sorted(sass | ptx)) or 'no code objects'} ({', '.join(sorted(found)) or 'none'})")]
    return []


def _gpu_runtimes(files: Files, m: Manifest) -> list[str]:
    found = describe_gpus(files.runtime, [f.path for f in m.files], m.toolkit_versions())
    stated = m.gpu_runtimes
    out = []
    for kind, have, want in (("cuda", stated.cuda, found.cuda), ("rocm", stated.rocm, found.rocm)):
        if have == want:
            continue
        if have is None or want is None:
            out.append(f"gpu_runtimes.{kind}: {'none' if have is None else 'recorded'}, but the files "
                       + (f"carry {kind.upper()} code or runtime {getattr(want, 'version', '')}".rstrip() if want
                          else f"carry no {kind.upper()} runtime or code"))
            continue
        for name in have.__dataclass_fields__:
            if getattr(have, name) != getattr(want, name):
                out.append(f"gpu_runtimes.{kind}.{name}: {_short(getattr(have, name))}, but the files say "
                           f"{_short(getattr(want, name))}")
    if stated.notes != found.notes:
        out.append(f"gpu_runtimes.notes: {_short(stated.notes)}, but the files say {_short(found.notes)}")
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _cpu(files: Files, m: Manifest) -> list[str]:
    folder = files.runtime / BIN_DIR
    names = sorted(p.name for p in folder.iterdir() if p.name.startswith(CPU_PREFIX) and p.name.endswith(".so")
                   and not p.is_dir()) if folder.is_dir() else []
    x86 = [n for n in names if (info := files.elf.get(f"{BIN_DIR}/{n}")) is not None and info.machine == "EM_X86_64"]
    out = []
    levels = [n for n in x86 if n != f"{CPU_PREFIX}.so"]
    known = ", ".join(lv.name for lv in cpulevels.LEVELS)
    for name in levels:
        variant = cpulevels.variant_of(name)
        if variant is None or cpulevels.level(variant) is None:
            out.append(f"files: {BIN_DIR}/{name} is no CPU level ggml builds ({known}), yet ggml's loader tries every "
                       f"{CPU_PREFIX}-*.so next to the executable")
    if levels and f"{CPU_PREFIX}.so" in x86:
        out.append(f"files: {BIN_DIR}/{CPU_PREFIX}.so beside {len(levels)} CPU level modules: a build makes one or "
                   "the other")
    if names == [f"{CPU_PREFIX}.so"] and x86:
        out += _single_level(files, m)
    return out


def _single_level(files: Files, m: Manifest) -> list[str]:
    unit = next((u for u in m.units if "cpu" in u.backends), m.units[0] if m.units else None)
    features = single_level_features(dict(unit.defines)) if unit is not None else None
    if unit is None or features is None:
        return []
    compiled = compiled_features(files.runtime / BIN_DIR / f"{CPU_PREFIX}.so")
    if isinstance(compiled, str):
        return []                     # not readable as a CPU module: the CPU checks say so
    reported = set(cpulevels.SELF_REPORT.values())
    claimed = frozenset(f for f in features if f in reported)
    level = next((lv for lv in cpulevels.LEVELS if set(lv.features) == set(features)), None)
    if compiled == (level.reported() if level else compiled & claimed):
        return []
    k = m.units.index(unit)
    on = ", ".join(f"GGML_{f}" for f in features) or "no GGML_ instruction-set option"
    return [f"units[{k}].defines: {on} ON, but {BIN_DIR}/{CPU_PREFIX}.so was compiled with {describe(compiled)}"]
