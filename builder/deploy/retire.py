"""--retire NAME [--keep N]: the only delete deploy ever does, of releases it moved to trash/ itself
(recorded in its ledger, proved by their release.json), beyond the newest N. A release's runtime files
are hard links shared with every release holding the same bytes (builder.deploy.shared): a delete frees
only the files no other release holds."""

from __future__ import annotations

from pathlib import Path

from builder.deploy import ledger as owned
from builder.deploy.defaults import DEFAULT_KEEP
from builder.deploy.layout import HostTree
from builder.deploy.service import Recorder
from builder.errors import AssembleError


def retire(name: str, keep: int = DEFAULT_KEEP, root: Path = Path("/")) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(deleted, kept) trash entries, by name; newest kept, by when deploy moved them there. Each is renamed
    to a hidden name recorded by its inode first, so a kill halfway through a delete is finished by the
    next run (ledger.tidy), never left looking like someone else's folder."""
    from builder.deploy.switch import locked

    if keep < 0:
        raise AssembleError(f"--keep {keep} is negative", where="--keep", fix="give how many to keep, e.g. --keep 2")
    tree = HostTree(root, name)
    with locked(tree, Recorder(), create=False) as run:
        entries = [p for p, _ in owned.recorded(tree, run.ledger, owned.RELEASE)
                   if p.parent == tree.trash and owned.owns(tree, run.ledger, p)]     # oldest first
        doomed = entries[:max(0, len(entries) - keep)]
        for path in doomed:
            run.ledger = owned.delete(tree, run.ledger, path)
        return tuple(p.name for p in doomed), tuple(p.name for p in entries[len(doomed):])
