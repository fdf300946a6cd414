"""Every action the release workflow pins (builder.release.workflow.ACTIONS) is the commit its tag names in
the action's own repository, and a node24 major (node20 actions are deprecated by GitHub): read from the
prepared store (scripts/prepare-actions.py checked the commit, every tree and file against their git ids,
and the tag against the pinned sha, when it exported them), and from the snapshots themselves when
ASSEMBLE_TEST_ACTION_SNAPSHOTS names them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from builder.release.workflow import ACTIONS
from tests.support import act


def test_each_pinned_action_is_its_tags_commit_and_a_node24_major():
    store = act.actions_store()
    for key, a in ACTIONS.items():
        folder = act.store_folder(store, a)
        marker = json.loads((folder / act.MARKER).read_text())
        assert (marker["repo"], marker["sha"], marker["tag"]) == (a.repo, a.sha, a.tag), (key, marker)
        assert marker["tag_checked"] is True, (key, "the snapshot lacked the tag: the pin is unchecked")
        runs = yaml.safe_load((folder / "action.yml").read_text())["runs"]
        # attest-build-provenance is composite (its own steps are GitHub's, stood in for here)
        assert runs["using"] == ("composite" if key == "attest-build-provenance" else "node24"), (key, runs)
        snapshots = os.environ.get(act.SNAPSHOTS_ENV)
        git_dir = Path(snapshots or "/nonexistent") / a.repo.replace("/", "+") / "repo"
        if git_dir.is_dir():                      # the snapshot at hand: ask git itself
            peeled = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", f"{a.tag}^{{commit}}"],
                                    capture_output=True, text=True, check=True).stdout.strip()
            assert peeled == a.sha, (key, a.tag, peeled)
