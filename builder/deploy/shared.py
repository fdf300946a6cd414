"""Identical runtime files across a tree's releases stored once: a new release's runtime file that another
release of the tree (in releases/ or trash/) already holds with the same sha256, size and mode is a hard
link to that file instead of a copy. Ten switches between two configurations of one runtime then hold one
runtime's bytes, not ten.

Only within the tree (a hard link never crosses a filesystem: EXDEV, and any other refusal of link(2),
falls back to a copy), only to release folders deploy's ledger records as its own, and never trusted:
the new release is hashed file by file against its manifest after it is assembled, and a release whose
linked files do not match is copied again in full (builder.deploy.release.stage). A release's files are
never written in place by deploy, so sharing them changes nothing a release serves; an edit by hand of a
shared file shows in every release holding it, and intact() refuses each of them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from builder.deploy import ledger as owned
from builder.deploy.layout import RUNTIME, HostTree
from builder.locks import Ledger
from builder.runtime.manifest import Manifest, ManifestInvalid

Key = tuple[str, int]       # (sha256, size)


def donors(tree: HostTree, ledger: Ledger) -> dict[Key, Path]:
    """One file of the tree's own releases per (sha256, size), from their manifests."""
    found: dict[Key, Path] = {}
    for folder, _ in owned.recorded(tree, ledger, owned.RELEASE):
        if folder.parent not in (tree.releases, tree.trash) or not owned.owns(tree, ledger, folder):
            continue
        try:
            manifest = Manifest.load(folder / RUNTIME)
        except (OSError, ManifestInvalid):
            continue
        for rec in manifest.files:
            found.setdefault((rec.sha256, rec.size), folder / RUNTIME / rec.path)
    return found


def linker(source: Path, manifest: Manifest, found: dict[Key, Path], copy: Callable[[str, str], str],
           linked: list[str]) -> Callable[[str, str], str]:
    """A copy function for shutil.copytree: a hard link to an identical file of the tree where one is
    (its path appended to `linked`), else `copy`."""
    by_path = {rec.path: (rec.sha256, rec.size) for rec in manifest.files}

    def link_or_copy(src: str, dst: str) -> str:
        key = by_path.get(Path(src).relative_to(source).as_posix())
        donor = found.get(key) if key else None
        if donor is not None and _same_kind(Path(src), donor):
            try:
                os.link(donor, dst)
            except OSError:         # another filesystem (EXDEV), too many links, a filesystem without them
                pass
            else:
                linked.append(dst)
                return dst
        return copy(src, dst)

    return link_or_copy


def _same_kind(src: Path, donor: Path) -> bool:
    """The donor is a regular file (not a link) of the source's size and permission bits."""
    try:
        a, b = src.stat(), donor.lstat()
    except OSError:
        return False
    return stat.S_ISREG(b.st_mode) and a.st_size == b.st_size and stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode)


def disk_use(folder: Path) -> int:
    """Bytes of the regular files under folder, each inode counted once."""
    seen: dict[tuple[int, int], int] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())
