"""Decide, before anything compiles, whether a CUDA unit may build with the toolkit it found.

Three refusals, each with the way out in the error:
- a GPU architecture the toolkit cannot target (sm_120 needs CUDA >= 12.8);
- no cuBLAS beside nvcc (ggml-cuda links it);
- Blackwell (sm_120/121) with CUDA >= 13: those builds lose 50-80% of token
  generation past 8k context, where the same commit built with CUDA 12.8 does not.
  A build goes ahead only with CUDA 12.x, the Blackwell flash-attention patch,
  or an explicit acceptance, and the manifest records which.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from builder.errors import AssembleError
from builder.toolchain.detect import CudaToolkit, version_tuple

# Consumer/workstation Blackwell (RTX 50xx, RTX PRO 6000) and DGX Spark (GB10):
# the chips that inherit the Ada-tuned flash-attention rule in ggml-cuda/fattn.cu.
BLACKWELL_ARCHS = ("120", "121")
REGRESSION_SINCE = (13, 0)
# The patch under patches/ that exempts Blackwell from that rule; the pipeline
# passes patched_fattn=True when it was applied to the tree being built.
BLACKWELL_PATCH = "cuda-fa-blackwell-exempt"
# Family-specific targets ("120f") first appeared in CUDA 12.9.
FAMILY_SUFFIX_SINCE = (12, 9)

ACCEPTED, PATCHED, NOT_APPLICABLE = "accepted", "patched", "not-applicable"

_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)(?:-real|-virtual)?$")


@dataclass(frozen=True)
class CudaPolicyResult:
    """What the manifest records about the CUDA toolkit a unit was built with."""
    toolkit: str                       # "12.8"
    root: str
    archs: tuple[str, ...]             # as requested, e.g. ("89", "120a")
    blackwell_targets: tuple[str, ...]  # the requested archs that are Blackwell
    blackwell_regression: str          # accepted | patched | not-applicable
    note: str | None = None            # a warning for the build log when not "not-applicable"

    def as_manifest(self) -> dict:
        return {"toolkit": self.toolkit, "root": self.root, "archs": list(self.archs),
                "blackwell_targets": list(self.blackwell_targets),
                "blackwell_regression": self.blackwell_regression}


def arch_base(arch: str) -> str | None:
    """"120a-real" -> "120"; None when it is not a CUDA architecture at all."""
    m = _ARCH_RE.match(arch.strip())
    return m.group(1) if m else None


def regression_applies(toolkit_version: str, archs: Sequence[str]) -> bool:
    """True when this toolkit + these targets hit the Blackwell long-context slowdown."""
    return (version_tuple(toolkit_version)[:2] >= REGRESSION_SINCE
            and any(arch_base(a) in BLACKWELL_ARCHS for a in archs))


def satisfies(version: str, constraint: str) -> bool:
    """Does "12.8" satisfy "==12.8", ">=12.4,<13", "!=13.0"? == compares only as many parts as it names."""
    have = version_tuple(version)
    for clause in (c.strip() for c in constraint.split(",") if c.strip()):
        m = re.match(r"^(==|!=|>=|<=|>|<)?\s*(\d+(?:\.\d+){0,2})$", clause)
        if not m:
            raise AssembleError(f"cannot read the CUDA toolkit constraint {constraint!r}",
                                fix='write it like "==12.8" or ">=12.4,<13"')
        op, want = m.group(1) or "==", version_tuple(m.group(2))
        if op in ("==", "!="):
            equal = have[:len(want)] == want
            if equal != (op == "=="):
                return False
            continue
        width = max(len(have), len(want))
        a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
        if not {">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]:
            return False
    return True


def ways_out() -> str:
    """The three ways past the Blackwell refusal, plus the explicit acceptance."""
    return ("pick one: (1) build CUDA with 12.8 -- `assemble toolchain cuda 12.8.1` then --cuda-root ROOT, "
            "or the container recipes cuda128-vulkan / rocm-cuda128 (or --container cuda12.8-build); "
            f"(2) apply the patch {BLACKWELL_PATCH} (--patch {BLACKWELL_PATCH}, or [patches] enable in the recipe; it exempts Blackwell from the Ada-tuned "
            "flash-attention rule; recovers generation, not prefill); (3) drive that card with Vulkan "
            "(recipe vulkan or cuda-vulkan with the card on Vulkan0); or accept the slowdown with "
            "--accept-blackwell-regression / [cuda] accept_blackwell_regression = true (recorded in the manifest)")


def check_cuda_unit(toolkit: CudaToolkit | None, archs: Sequence[str], *, accept_regression: bool,
                    patched_fattn: bool, where: str, constraint: str | None = None) -> CudaPolicyResult:
    """Refuse (AssembleError, exit 2) a CUDA unit that must not build; else say what to record."""
    if toolkit is None:
        raise AssembleError("no CUDA toolkit found (nvcc)", where=where,
                            fix="install one, run `assemble toolchain cuda 12.8.1` and pass --cuda-root ROOT, "
                                "or set CUDAToolkit_ROOT")
    label = f"CUDA {toolkit.version} at {toolkit.root}"
    if constraint and not satisfies(toolkit.version, constraint):
        raise AssembleError(f"{label} does not satisfy the recipe's toolkit = {constraint!r}", where=where,
                            fix="run `assemble toolchain cuda VERSION` for a matching version and pass "
                                "--cuda-root ROOT, or build the unit in a container (--container cuda12.8-build)")
    if not archs:
        raise AssembleError("no CUDA architecture requested", where=where,
                            fix='list them in [cuda] architectures, e.g. ["89", "120"]')
    _check_archs(toolkit, archs, label, where)
    blackwell = tuple(a for a in archs if arch_base(a) in BLACKWELL_ARCHS)
    note = None
    better = "a CUDA 12.8 build is better (recipes cuda128-vulkan / rocm-cuda128, or `assemble toolchain cuda 12.8.1`)"
    if not regression_applies(toolkit.version, archs):
        state = NOT_APPLICABLE
    elif patched_fattn:
        state = PATCHED
        note = (f"CUDA {toolkit.version} + Blackwell: built with patch {BLACKWELL_PATCH}; long-context generation "
                f"is recovered, prefill is not; {better}")
    elif accept_regression:
        state = ACCEPTED
        note = (f"CUDA {toolkit.version} + Blackwell: the 50-80% long-context generation slowdown was accepted "
                f"and is recorded in the manifest; {better}")
    else:
        raise AssembleError(f"{label} building for sm_{'/sm_'.join(arch_base(a) for a in blackwell)} "
                            "(Blackwell) loses 50-80% of token generation past 8k context",
                            where=where, fix=ways_out())
    # Checked after the Blackwell rule: that refusal already points at another toolkit.
    if not toolkit.has_cublas:
        partial = " (only the runtime libcublas.so.N, no libcublas.so / cublas_v2.h)" \
            if getattr(toolkit, "cublas_runtime_only", False) else ""
        raise AssembleError(f"{label} has no cuBLAS development files{partial}", where=where,
                            fix="install the toolkit's cuBLAS (e.g. libcublas-dev / cuda-libraries-dev), or "
                                "provision one with `assemble toolchain cuda VERSION` (libcublas is among its "
                                "components)")
    return CudaPolicyResult(toolkit=toolkit.version, root=toolkit.root, archs=tuple(archs),
                            blackwell_targets=blackwell, blackwell_regression=state, note=note)


def _check_archs(toolkit: CudaToolkit, archs: Sequence[str], label: str, where: str) -> None:
    supported = {arch_base(a) for a in toolkit.archs} - {None}
    if not supported:
        raise AssembleError(f"{label}: `nvcc --list-gpu-arch` named no architecture", where=where,
                            fix="check that this nvcc runs (it may be a broken or partial toolkit)")
    for a in archs:
        base = arch_base(a)
        if base is None:
            raise AssembleError(f"{a!r} is not a CUDA architecture", where=where,
                                fix='use compute capabilities such as "89", "90" or "120a"')
        if base not in supported:
            newest = max(supported, key=int)
            hint = ("sm_120 needs CUDA >= 12.8, sm_121 CUDA >= 12.9; " if base in BLACKWELL_ARCHS else "")
            raise AssembleError(f"{label} cannot target sm_{base} (newest it knows: sm_{newest})", where=where,
                                fix=f"{hint}use a toolkit that lists compute_{base} in `nvcc --list-gpu-arch`, "
                                    "or drop it from [cuda] architectures")
        if _ARCH_RE.match(a.strip()).group(2) == "f" and version_tuple(toolkit.version)[:2] < FAMILY_SUFFIX_SINCE:
            raise AssembleError(f"{label} has no family-specific target {a!r} (CUDA >= 12.9 does)", where=where,
                                fix=f"use {base} or {base}a instead")
