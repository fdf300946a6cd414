"""Inputs are read-only to repair: one check for the Linux and the Windows repair, before anything
is copied or unpacked. No input is a folder that would walk the system or the cache; --out is
none of the inputs, holds none and lies inside none; --keep never deletes one (outdir.publish's
`protect`)."""

from __future__ import annotations

from pathlib import Path

from builder import outdir, paths
from builder.prebuilt.request import RepairRequest


def read_paths(req: RepairRequest) -> tuple[tuple[str, Path], ...]:
    """(words, path) of everything the repair reads: each input (folder, archive or .deb) and each
    --lib-path folder."""
    return (tuple(("an input", Path(given).expanduser()) for given in req.inputs)
            + tuple(("a --lib-path folder", Path(d).expanduser()) for d in req.lib_paths))


def check_inputs(inputs: tuple[str, ...]) -> None:
    """Refuse (exit 2) an input folder that is /, a system folder, the home or the cache, or holds
    the home or the cache; first of all, before any input is even listed."""
    cache = paths.cache_dir()
    for given in inputs:
        outdir.check_input(given, cache=cache)


def checked_target(req: RepairRequest) -> outdir.Target | None:
    """Refuse (exit 2) an --out that is, holds or lies inside an input; the checked output (None with
    --dry-run, which writes nothing)."""
    return None if req.dry_run else outdir.check_destination(req.out, cache=paths.cache_dir(),
                                                             inputs=read_paths(req))
