"""What `assemble repair` was asked to do, typed at the edge (the CLI parses each flag once): read by
the Linux and the Windows repair alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.config.targets import GfxTarget


@dataclass(frozen=True)
class RepairRequest:
    inputs: tuple[str, ...]
    name: str
    out: Path
    lib_paths: tuple[Path, ...] = ()            # checked, resolved folders (cli.args.lib_dirs)
    targets: tuple[str, ...] = ()               # executables to carry (default: every llama-*)
    without: tuple[str, ...] = ()               # executables and modules left out on purpose (--without)
    hip_targets: tuple[GfxTarget, ...] = ()     # also check AMD data/code for these cards
    check_env: tuple[tuple[str, str], ...] = ()
    verify_static: bool = False
    accept_loader_risk: str | None = None       # the user's reason, recorded in the manifest
    dry_run: bool = False
    keep: int | None = None
    wait: bool = True

    def read_paths(self) -> tuple[tuple[str, Path], ...]:
        """(words, path) of everything the repair reads: each input (folder, archive or .deb) and each
        --lib-path folder. --out may be none of them, hold none and lie inside none; --keep deletes none."""
        return (tuple(("an input", Path(given).expanduser()) for given in self.inputs)
                + tuple(("a --lib-path folder", d) for d in self.lib_paths))
