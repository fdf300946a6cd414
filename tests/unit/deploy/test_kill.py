"""SIGKILL at any instant leaves exactly one valid `current`: the flip alone, killed mid-loop many times,
and whole `deploy --root` runs killed at points spread over their length, each followed by a deploy that
finishes, cleans what the killed one left and leaves no stray copy."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from builder.check.tinymodel import write_tiny_llama
from builder.deploy import ledger as owned
from builder.deploy.layout import HostTree
from builder.deploy.release import intact
from builder.deploy.service import Recorder
from builder.deploy.switch import _Run
from tests.support.common import REPO, assemble
from tests.support.runtimes import make_runtime

FLIPPER = """
import sys
from pathlib import Path
from builder.deploy.layout import HostTree
from builder.deploy.service import Recorder
from builder.deploy.switch import _Run
run = _Run(HostTree(Path(sys.argv[1]), "chat"), Recorder())
print("ready", flush=True)
i = 0
while True:
    run.flip("a" if i % 2 else "b")
    i += 1
"""


def test_a_killed_flip_leaves_one_current(tmp_path):
    tree = HostTree(tmp_path, "chat")
    for rid in ("a", "b"):
        tree.release(rid).mkdir(parents=True)
    os.symlink("releases/a", tree.current)
    rng = random.Random(29)
    for _ in range(25):
        child = subprocess.Popen([sys.executable, "-c", FLIPPER, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
                                 text=True)
        assert child.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert tree.current.is_symlink() and os.readlink(tree.current) in ("releases/a", "releases/b")
        assert tree.current.resolve().is_dir()
    _Run(tree, Recorder()).tidy()         # a temporary link a kill left beside `current` is deploy's to remove
    assert not list(tree.base.glob(".current.tmp-*")) and tree.current.is_symlink()


def _state(root: Path) -> tuple[str | None, list[str]]:
    """(release `current` points at, every name in releases/) after checking the invariant."""
    tree = HostTree(root, "chat")
    names = sorted(p.name for p in tree.releases.iterdir()) if tree.releases.is_dir() else []
    if not os.path.lexists(tree.current):
        return None, names
    rid = tree.current_id()
    assert rid is not None and tree.release(rid).is_dir(), os.readlink(tree.current)
    assert intact(tree.release(rid), rid) is None
    assert owned.owns_current(tree, owned.load(tree))
    return rid, names


def test_killed_deploys_leave_one_current_and_the_next_one_finishes(tmp_path):
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    rt = make_runtime(tmp_path / "rt")
    model = write_tiny_llama(root / "tiny.gguf")
    argv = [sys.executable, "-m", "builder", "deploy", str(rt), "--name", "chat", "--model", str(model), "--root",
            str(root)]
    first = subprocess.run(argv + ["--port", "9000"], cwd=REPO, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    start = time.monotonic()
    timed = subprocess.run(argv + ["--port", "9001"], cwd=REPO, capture_output=True, text=True)
    length = time.monotonic() - start
    assert timed.returncode == 0, timed.stderr
    rng = random.Random(7)
    ports = iter(range(9100, 9200))
    killed = 0
    for i in range(8):
        port = next(ports)
        child = subprocess.Popen(argv + ["--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        time.sleep(length * (i + rng.random()) / 8)        # spread over the whole run
        child.send_signal(signal.SIGKILL)
        killed_at = child.wait()
        current, releases = _state(root)
        assert current is not None                          # a release was in service before: one still is
        killed += killed_at == -signal.SIGKILL
        after = assemble(*argv[3:], "--port", str(next(ports)))
        assert after.returncode == 0, after.stderr
        current, releases = _state(root)
        assert releases == [current]                        # no copy, partial or stray release left behind
        tree = HostTree(root, "chat")
        ledger = owned.load(tree)
        for p in tree.trash.iterdir():
            assert owned.owns(tree, ledger, p), p           # everything moved aside is still provably deploy's
        assert not list(tree.base.glob(".current.tmp-*")) and not list(tree.releases.glob("*.partial-*"))
    assert killed >= 6          # the kills landed inside the runs, not after them
