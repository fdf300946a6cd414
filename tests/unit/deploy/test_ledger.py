"""The ownership rule on real files: what deploy wrote is proved by its bytes (a rewrite in flight by
either the old or the new), anything else in the way is refused naming it, copies a killed run left are
removed only while they are the very folder it made, and a move keeps a release provably deploy's."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from builder.deploy import ledger as owned
from builder.deploy.layout import RECORD, HostTree
from builder.errors import AssembleError


@pytest.fixture
def tree(tmp_path) -> HostTree:
    t = HostTree(tmp_path, "chat")
    t.base.mkdir(parents=True)
    return t


def release(tree: HostTree, rid: str) -> Path:
    p = tree.release(rid)
    p.mkdir(parents=True)
    (p / RECORD).write_text(json.dumps({"release": rid}))
    return p


def test_a_written_file_is_ours_until_someone_changes_it(tree):
    ledger = owned.write_file(tree, owned.load(tree), tree.unit, "[Unit]\n")
    assert owned.owns(tree, ledger, tree.unit) and tree.unit.read_text() == "[Unit]\n"
    assert owned.load(tree) == ledger                               # saved as it is
    ledger = owned.write_file(tree, ledger, tree.unit, "[Unit]\nA=1\n")
    assert tree.unit.read_text() == "[Unit]\nA=1\n"
    assert [e.path for e in ledger.entries] == ["/etc/systemd/system/assemble-chat.service"]   # settled: one entry
    tree.unit.write_text("[Unit]\nA=1\n# edited by hand\n")
    assert not owned.owns(tree, ledger, tree.unit)
    with pytest.raises(AssembleError) as e:
        owned.write_file(tree, ledger, tree.unit, "[Unit]\n")
    assert e.value.where == str(tree.unit) and "did not write" in e.value.what
    assert tree.unit.read_text().endswith("# edited by hand\n")    # never replaced


def test_no_refusal_forgets_an_edited_file(tree):
    """A run's tidy settles what a kill left in flight, but keeps the entry of a file someone edited: the file
    is refused as foreign while edited, and deploy's again once the edit is undone (a refused --rollback once
    dropped it for good)."""
    ledger = owned.write_file(tree, owned.load(tree), tree.unit, "[Unit]\n")
    tree.unit.write_text("[Unit]\n# edited by hand\n")
    ledger = owned.tidy(tree, ledger)
    assert [e.path for e in owned.load(tree).entries] == ["/etc/systemd/system/assemble-chat.service"]
    with pytest.raises(AssembleError):
        owned.refuse_foreign(tree, ledger, [tree.unit])
    tree.unit.write_text("[Unit]\n")
    assert owned.owns(tree, owned.tidy(tree, ledger), tree.unit)
    tree.unit.unlink()                                             # gone: nothing left to own
    assert owned.tidy(tree, ledger).entries == ()


def test_a_file_that_was_there_before_is_foreign(tree):
    tree.sysusers.parent.mkdir(parents=True)
    tree.sysusers.write_text("u someone-else\n")
    with pytest.raises(AssembleError):
        owned.refuse_foreign(tree, owned.load(tree), [tree.unit, tree.sysusers])
    assert tree.sysusers.read_text() == "u someone-else\n"


def test_a_rewrite_killed_in_flight_leaves_the_file_ours(tree):
    """Recorded before, settled after: between the two the ledger holds both digests, so the old bytes
    (killed before the rename) and the new ones (killed after) are both deploy's."""
    ledger = owned.write_file(tree, owned.load(tree), tree.unit, "old\n")
    import hashlib
    new = owned._entry(tree, owned.FILE, tree.unit, hashlib.sha256(b"new\n").hexdigest())
    in_flight = owned._add(ledger, new)
    assert owned.owns(tree, in_flight, tree.unit)                   # killed before the rename
    tree.unit.write_text("new\n")
    assert owned.owns(tree, in_flight, tree.unit)                   # killed after it
    owned.save(tree, in_flight)
    settled = owned.tidy(tree, owned.load(tree))
    assert [e.sha256 for e in settled.entries] == [new.sha256]


def test_current_is_ours_only_as_a_link_to_one_of_our_releases(tree):
    ledger = owned.load(tree)
    os.symlink("releases/r1", tree.current)
    release(tree, "r1")
    assert not owned.owns_current(tree, ledger)                     # r1 is not deploy's
    partial = tree.releases / "r2.partial-x"
    partial.mkdir()
    ledger = owned.start_partial(tree, ledger, partial)
    (partial / RECORD).write_text(json.dumps({"release": "r2"}))
    ledger = owned.move(tree, ledger, partial, tree.release("r2"))
    tree.current.unlink()
    os.symlink("releases/r2", tree.current)
    assert owned.owns_current(tree, ledger)
    tree.current.unlink()
    os.symlink(str(tree.release("r2")), tree.current)               # the same folder, by an absolute link
    assert not owned.owns_current(tree, ledger)


def test_tidy_removes_only_the_copy_it_made(tree):
    ledger = owned.load(tree)
    mine = tree.releases / "a.partial-1"
    mine.mkdir(parents=True)
    ledger = owned.start_partial(tree, ledger, mine)
    (mine / "big").write_bytes(b"x" * 1000)
    lookalike = tree.releases / "b.partial-2"
    lookalike.mkdir()
    ledger = owned.start_partial(tree, ledger, lookalike)
    shutil.rmtree(lookalike)
    lookalike.mkdir()                                               # someone else's folder at a recorded path
    (lookalike / "theirs").write_text("keep me")
    ledger = owned.tidy(tree, ledger)
    assert not mine.exists() and (lookalike / "theirs").read_text() == "keep me"
    assert ledger.entries == () and owned.load(tree).entries == ()


def test_a_copy_folder_killed_before_its_inode_was_recorded_is_removed_only_while_empty(tree):
    """A SIGKILL between mkdir and start_partial left an unrecorded empty folder, which no later run could
    prove its own (the CI's kill test, 2026-12-05): its name is recorded before the mkdir now."""
    ledger = owned.load(tree)
    tree.releases.mkdir(parents=True)
    empty, filled = tree.releases / "a.partial-1", tree.releases / "b.partial-2"
    ledger = owned.intend_partial(tree, ledger, empty)
    ledger = owned.intend_partial(tree, ledger, filled)
    empty.mkdir()                                                   # killed here
    filled.mkdir()
    (filled / "theirs").write_text("keep me")                      # a folder at that name with something in it
    ledger = owned.tidy(tree, owned.load(tree))
    assert not empty.exists() and (filled / "theirs").read_text() == "keep me"
    assert ledger.entries == ()
    mine = tree.releases / "c.partial-3"
    ledger = owned.intend_partial(tree, ledger, mine)
    mine.mkdir()
    ledger = owned.start_partial(tree, ledger, mine)                # the inode replaces the name
    assert [e.ino is not None for e in ledger.entries] == [True]
    (mine / "big").write_bytes(b"x" * 1000)
    assert owned.tidy(tree, ledger).entries == () and not mine.exists()


def test_a_moved_release_stays_ours_and_the_destination_is_never_replaced(tree):
    ledger = owned.load(tree)
    partial = tree.releases / "r.partial-1"
    partial.mkdir(parents=True)
    ledger = owned.start_partial(tree, ledger, partial)
    (partial / RECORD).write_text(json.dumps({"release": "r"}))
    ledger = owned.move(tree, ledger, partial, tree.release("r"))
    dest = tree.trash / "r.20261201T000000Z"
    ledger = owned.move(tree, ledger, tree.release("r"), dest)
    assert owned.owns(tree, ledger, dest) and [e.path for e in ledger.entries] == [str(tree.host_path(dest))]
    release(tree, "r")                                              # a folder appears where the move goes back
    with pytest.raises(AssembleError):
        owned.move(tree, ledger, dest, tree.release("r"))
    assert dest.is_dir()
    ledger = owned.delete(tree, owned.load(tree), dest)
    assert not dest.exists() and not list(tree.trash.iterdir())


def test_a_foreign_base_and_a_foreign_ledger(tree):
    (tree.base / "notes").write_text("mine")
    with pytest.raises(AssembleError) as e:
        owned.refuse_foreign_base(tree)
    assert "notes" in e.value.what
    tree.state.mkdir()
    tree.ledger.write_text(json.dumps({"place": "/opt/assemble/other", "entries": []}))
    with pytest.raises(AssembleError) as e:
        owned.load(tree)
    assert "not one deploy wrote" in e.value.what
