"""Paths inside a --root image, read as the booted image will read them.

An image's `etc/systemd` may be a link to `/usr/lib/...`, its `opt` a link to `/var/opt`: absolute
targets that name the image's own folders, not this machine's. Following them with the host's own
path lookup (open, mkdir, realpath) would write the unit or the tree onto the host. `inside` walks a
path component by component instead: an absolute link's target is read from the image's root, a
relative one from the link's folder, and `..` never climbs above the root. What comes back is a path
on this machine under the root whose existing part holds no link, so the host's lookup of it stays
in the image; what cannot be resolved (a loop) or still lands outside is refused in one line (exit 2)
before anything is written.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from builder.errors import AssembleError

MAX_LINKS = 40      # as the kernel's path lookup (ELOOP)


def inside(root: Path, rel: str | PurePosixPath) -> Path:
    """root/rel with every link resolved inside `root` (a real path: no links in it); components that do
    not exist yet are kept as given. Refused: a link loop, or a result whose real path is outside root."""
    todo = [p for p in PurePosixPath(rel).parts if p != "/"][::-1]     # a stack: next component last
    done: list[str] = []
    links = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if not here.is_symlink():
            done.append(part)
            continue
        links += 1
        if links > MAX_LINKS:
            raise _refused(root, rel, "its links loop")
        target = PurePosixPath(os.readlink(here))
        if target.is_absolute():
            done = []
        todo.extend(p for p in target.parts[::-1] if p != "/")
    out = root.joinpath(*done)
    real = Path(os.path.realpath(out))
    if not real.is_relative_to(os.path.realpath(root)):       # a race with whoever changes the image: still never outside
        raise _refused(root, rel, f"it resolves to {real}, outside the image")
    return out


def in_image(root: Path, given_root: str, given: str | Path, what: str) -> Path:
    """A path the operator named on this machine (--model, --secret FILE), inside the image: named through
    the root as given (a link to the image works) or as resolved, then resolved as the image reads it."""
    path = Path(os.path.abspath(Path(given).expanduser()))
    for base in (Path(os.path.abspath(Path(given_root).expanduser())), root):
        if path.is_relative_to(base):
            return inside(root, path.relative_to(base).as_posix())
    raise AssembleError(f"{what} is outside --root: the image would not hold it", where=str(path),
                        fix=f"put it inside {root} (the env file and the unit name it as the image sees it)")


def _refused(root: Path, rel: str | PurePosixPath, why: str) -> AssembleError:
    return AssembleError(f"/{PurePosixPath(rel).as_posix().lstrip('/')} in the image cannot be resolved inside "
                         f"--root ({why}); nothing was written", where=str(root),
                         fix="fix the image's links so they name paths inside it")
