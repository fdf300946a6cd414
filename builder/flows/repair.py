"""assemble repair: prebuilt llama.cpp into a verified runtime with the same layout and guarantees as
`build`. What `auditwheel repair` did for wheels: find what is there, carry what it needs, set the
RPATHs, record it, prove it.

    inputs -> plan (unpack, read, refuse) -> place (copy, licences, manifest) -> verify -> swap in

--dry-run runs the same steps but the last: it shows the plan, places a copy in its scratch folder,
verifies it and exits as the real run would (2 for a refusal, 1 for a failed check); --out is
checked, never written.

One flow for every platform: the CLI picks the platform from the inputs (platform_of) and this
module runs its plan / show / place / verify (builder.flows.platforms) inside publish_runtime.
"""

from __future__ import annotations

from pathlib import Path

from builder import paths, ui
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

    if req.dry_run:
        # the real run's refusal of --out first (reads only), then everything it does but the writing
        publish.check_destination(req.out, cache=paths.cache_dir(), inputs=req.read_paths())
    return publish.publish_runtime(req.out, fill, scratch="repair-", reads=req.read_paths(), wait=req.wait,
                                   keep=req.keep, check=lambda staged: platform.verify(staged, req),
                                   checked="the repaired runtime",
                                   preview=(lambda work: _preview(req, platform, work)) if req.dry_run else None)


def _preview(req: RepairRequest, platform: RepairPlatform, work: Path) -> None:
    """--dry-run: the plan shown, then the real run's checks on a copy in the scratch folder `work`
    (removed afterwards; --out is never written), so that it fails where the real run would: the same
    refusals (exit 2), the same verify table and its failure (exit 1)."""
    from builder.check.verify import require_passed   # the checks load only when a runtime is checked
    plan = platform.plan(req, work)
    platform.show(plan, req)
    staged = work / DRY_RUN_STAGE
    staged.mkdir()
    ui.step(f"dry run: the checks of the real run, on a copy in the scratch folder ({req.out} is not written)")
    said = ui.level()
    ui.set_level(min(said, ui.QUIET))             # the copy's progress is no news: the plan above said it
    try:
        platform.place(plan, req, staged).write(staged)
    finally:
        ui.set_level(said)
    require_passed(platform.verify(staged, req), str(req.out), "the repaired runtime (dry run)")


DRY_RUN_STAGE = "dry-run"          # the copy --dry-run checks, inside its scratch folder
