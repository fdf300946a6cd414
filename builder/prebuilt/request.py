"""What `assemble repair` was asked to do: read by the Linux and the Windows repair alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RepairRequest:
    inputs: tuple[str, ...]
    name: str
    out: Path
    lib_paths: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()               # executables to carry (default: every llama-*)
    without: tuple[str, ...] = ()               # executables and modules left out on purpose (--without)
    hip_targets: tuple[str, ...] = ()           # also check AMD data/code for these cards
    check_env: tuple[tuple[str, str], ...] = ()
    verify_static: bool = False
    accept_loader_risk: str | None = None       # the user's reason, recorded in the manifest
    dry_run: bool = False
    keep: int | None = None
    wait: bool = True
