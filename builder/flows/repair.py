"""assemble repair: prebuilt llama.cpp into a verified runtime with the same layout and guarantees as
`build`. What `auditwheel repair` did for wheels: find what is there, carry what it needs, set the
RPATHs, record it, prove it.

    inputs -> plan (unpack, read, refuse) -> place (copy, licences, manifest) -> verify -> swap in

One flow for every platform: the CLI picks the platform from the inputs (platform_of) and this
module runs its plan / show / place / verify (builder.flows.platforms) inside publish_runtime.
"""

from __future__ import annotations

from pathlib import Path

from builder.config.recipe import NAME_RE
from builder.errors import AssembleError
from builder.flows import publish
from builder.flows.platforms import RepairPlatform, linux, windows
from builder.prebuilt.request import RepairRequest
from builder.windows import PLATFORM as WINDOWS

PLATFORMS: dict[str, RepairPlatform] = {"linux": linux, WINDOWS: windows}


def platform_of(inputs: tuple[str, ...]) -> str:
    """windows when every input is a Windows zip or folder, linux when none is; a mix is refused."""
    flags = [windows.is_windows_input(i) for i in inputs]
    if all(flags):
        return WINDOWS
    if any(flags):
        win = next(i for i, f in zip(inputs, flags, strict=True) if f)
        other = next(i for i, f in zip(inputs, flags, strict=True) if not f)
        raise AssembleError(f"{win} holds Windows binaries and {other} does not", where=other,
                            fix="repair Windows zips and Linux inputs separately: one runtime runs on one OS")
    return "linux"


def repair(req: RepairRequest, platform: RepairPlatform) -> Path | None:
    """The runtime folder, or None for --dry-run (the plan shown, nothing written)."""
    if not NAME_RE.fullmatch(req.name):
        raise AssembleError(f"{req.name!r} is not a runtime name", where="--name",
                            fix="lower-case letters, digits, '.', '_' and '-', e.g. --name cuda-vulkan-b7416")

    def fill(staged: Path, work: Path) -> None:
        platform.place(platform.plan(req, work), req, staged).write(staged)

    return publish.publish_runtime(req.out, fill, scratch="repair-", reads=req.read_paths(), wait=req.wait,
                                   keep=req.keep, check=lambda staged: platform.verify(staged, req),
                                   checked="the repaired runtime",
                                   preview=(lambda work: platform.show(platform.plan(req, work), req))
                                   if req.dry_run else None)
