"""Trash that scales: identical runtime files across releases and trash are stored once (hard links within
the tree), so ten switches between two configurations of one runtime hold about one runtime's bytes, not
ten; every release stays intact; where a link cannot be made (another filesystem) the file is copied."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy import shared
from builder.deploy.layout import RUNTIME, HostTree
from builder.deploy.release import intact
from builder.deploy.service import Recorder
from builder.deploy.switch import DeployRequest, deploy
from tests.support.runtimes import make_runtime


@pytest.fixture
def image(tmp_path) -> tuple[Path, Path, Path]:
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    (root / "srv").mkdir()
    return root, make_runtime(tmp_path / "rt"), write_tiny_llama(root / "srv" / "tiny.gguf")


def switch(root: Path, rt: Path, model: Path, port: int) -> str:
    return deploy(DeployRequest(str(rt), "chat", str(model), port=port, root=str(root)), Recorder()).release


def test_ten_switches_hold_one_runtime(image):
    root, rt, model = image
    runtime_bytes = shared.disk_use(rt)
    ids = [switch(root, rt, model, 9000 + i % 2) for i in range(11)]         # ten switches between two releases
    assert len(set(ids)) == 2
    tree = HostTree(root, "chat")
    trash = sorted(tree.trash.iterdir())
    assert len(trash) == 10
    trash_bytes = shared.disk_use(tree.trash)
    plain = sum(f.stat().st_size for f in tree.trash.rglob("*") if f.is_file() and not f.is_symlink())
    print(f"runtime {runtime_bytes} B; trash: {len(trash)} entries, {plain} B counted per file, "
          f"{trash_bytes} B counted per inode; base {shared.disk_use(tree.base)} B")
    assert plain >= 10 * runtime_bytes                      # ten runtimes' worth of names...
    assert trash_bytes < 1.2 * runtime_bytes                # ...in one runtime's bytes
    assert shared.disk_use(tree.base) < 1.2 * runtime_bytes   # releases/ shares them too
    for entry in [*trash, tree.release(ids[-1])]:
        assert intact(entry, entry.name.split(".20")[0]) is None, entry


def test_a_link_refused_falls_back_to_a_copy(image, monkeypatch):
    root, rt, model = image
    switch(root, rt, model, 9000)

    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    second = switch(root, rt, model, 9001)
    tree = HostTree(root, "chat")
    files = [f for f in (tree.release(second) / RUNTIME).rglob("*") if f.is_file() and not f.is_symlink()]
    assert files and all(f.stat().st_nlink == 1 for f in files)
    assert intact(tree.release(second), second) is None


def test_a_donor_that_differs_from_its_manifest_is_not_shared(image):
    """A shared file edited by hand in place (same size, other bytes: every release holding it is damaged):
    the next release is copied in full from the runtime, never linked to the edited file."""
    root, rt, model = image
    first = switch(root, rt, model, 9000)
    switch(root, rt, model, 9001)                                            # first -> trash, sharing its files
    tree = HostTree(root, "chat")
    entry = next(tree.trash.iterdir())
    victim = max((f for f in (entry / RUNTIME).rglob("*") if f.is_file() and not f.is_symlink()),
                 key=lambda f: f.stat().st_size)
    assert victim.stat().st_nlink == 2
    with open(victim, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    again = switch(root, rt, model, 9000)
    assert again == first and intact(tree.release(again), again) is None
    copied = tree.release(again) / RUNTIME / victim.relative_to(entry / RUNTIME)
    assert copied.stat().st_nlink == 1 and copied.read_bytes() != victim.read_bytes()
