"""The cache's place and its scratch folders (builder/paths.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder import paths
from builder.cli.main import main
from builder.errors import AssembleError


def test_no_home_is_one_line_that_names_the_way_out(monkeypatch):
    for name in ("ASSEMBLE_CACHE", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    assert paths.home() is None
    with pytest.raises(AssembleError) as info:
        paths.cache_dir()
    assert "ASSEMBLE_CACHE" in info.value.line() and "\n" not in info.value.line()
    assert paths.clean_stale_scratch() == []          # nothing to clean is no reason to fail a command


def test_a_user_without_home_gets_one_line_from_the_cli(monkeypatch, capsys):
    """As under `docker run --user 54321:54321` with no HOME: every command says so in one line."""
    for name in ("ASSEMBLE_CACHE", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    assert main(["show", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "ASSEMBLE_CACHE" in err, err


def test_stale_scratch_is_removed_only_for_dead_runs_of_this_host(monkeypatch, tmp_path):
    monkeypatch.setenv("ASSEMBLE_CACHE", str(tmp_path))
    root = paths.scratch_root()
    dead = 2 ** 22 + 12345                      # above any pid_max default: no such process
    mine_dead = root / f"build-{paths._host_tag()}-{dead}-abc"
    mine_alive = root / f"build-{paths._host_tag()}-{os.getpid()}-abc"
    other_host = root / f"build-0badc0de-{dead}-abc"
    users = root / "build-notes"
    for p in (mine_dead, mine_alive, other_host, users):
        p.mkdir(parents=True)
    assert paths.clean_stale_scratch() == [mine_dead]
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in (mine_alive, other_host, users))
