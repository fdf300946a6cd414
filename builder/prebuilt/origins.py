"""Where a file of a repair input came from, in the user's words: the archive or .deb it was in and
its path inside (`llama.cpp-tools_0.7.0+dfsg-2_amd64.deb:usr/bin/llama-server`), or a folder input's
path as given and the path under it. Never the scratch folder it was unpacked into: that is gone
after the run, and its random name would make two repairs of the same inputs differ (manifest
origins, --dry-run's "from" column, refusals).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import AssembleError


@dataclass(frozen=True)
class Unpacked:
    """One input and where its content lies on this run."""
    given: str                               # the input as typed (debs: the .deb arguments joined)
    root: Path                               # the unpack folder, or the folder input itself (resolved)
    folder: bool                             # read in place: its real paths are the user's own
    members: dict[str, str] = field(default_factory=dict)   # path under root -> name of the file that held it


def origin(inputs: Sequence[Unpacked], path: str | Path) -> str:
    """`path` named by the input that holds it; a path of no input (a --lib-path or host library) as it is."""
    p = Path(path)
    for u in inputs:
        if not p.is_relative_to(u.root):
            continue
        rel = p.relative_to(u.root).as_posix()
        if u.folder:
            return u.given if rel == "." else f"{u.given.rstrip('/') or '/'}/{rel}".replace("//", "/")
        if rel == ".":
            return u.given
        return f"{u.members.get(rel) or Path(u.given).name}:{rel}"
    return str(path)


def texts_origin(inputs: Sequence[Unpacked], texts: Sequence[Path]) -> str:
    """Where licence texts were found, in the user's words: each text by its input and member
    (`llama-b7416-bin-win-cpu-x64.zip:LICENSE`), never the unpack folder it was read from."""
    return ", ".join(origin(inputs, t) for t in texts)


def named(inputs: Sequence[Unpacked], text: str | None) -> str | None:
    """Every path under an unpack folder in `text` (a message) named by its input."""
    if not text:
        return text
    for u in inputs:
        if u.folder:
            continue
        text = re.sub(re.escape(str(u.root)) + r"(/[^\s,;:'\"()]*)?", lambda m: origin(inputs, m.group()), text)
    return text


def renamed(inputs: Sequence[Unpacked], exc: AssembleError) -> AssembleError:
    """The same refusal, naming the user's files instead of the unpack folders."""
    out = copy.copy(exc)
    out.what, out.where, out.fix = named(inputs, exc.what) or exc.what, named(inputs, exc.where), named(inputs, exc.fix)
    out.details = named(inputs, exc.details)
    out.args = (out.what,)
    return out
