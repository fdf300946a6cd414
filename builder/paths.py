"""Where things live: the packaged data folders and the user's cache."""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent
PACKAGE_DIR = _PKG             # builder/ itself (a container build context copies it)
PROJECT_DIR = _PKG.parent      # the checkout (or site-packages) holding it


def builtin_data(name: str) -> Path:
    """A data file shipped inside the package (builder/data/): the policy, the feature registry."""
    return _PKG / "data" / name


def data_dir(name: str) -> Path:
    """A top-level data folder (recipes, patches, containers).

    Installed wheels carry them under builder/_data/; a source checkout or an
    editable install reads them from the repository root.
    """
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    return _PKG / "_data" / name


def cache_dir() -> Path:
    """$ASSEMBLE_CACHE, else $XDG_CACHE_HOME/assemble, else ~/.cache/assemble."""
    explicit = os.environ.get("ASSEMBLE_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(base) / "assemble").resolve()
