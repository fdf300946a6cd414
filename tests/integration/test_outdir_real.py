"""The output folder's rules with real builds (slow tier: the cpu build)."""

from __future__ import annotations

import os
import shutil

from builder.flows import publish
from tests.support.common import TEST_CACHE, assemble
from tests.support.manifests import whole
from tests.unit.test_outdir import snapshot  # shared with the quick tier


def test_look_alike_names_and_glob_characters_are_never_touched(cpu_runtime, tmp_path):
    """`--out 'runtime[1]' --keep 0` once removed runtime1.previous-...; a user's runtime-cpu.assembling-v2
    was taken for a leftover. Only what the ledger recorded may be removed."""
    p = tmp_path / "p"
    p.mkdir()
    user = {n: p / n for n in ("runtime1.previous-20200101-000000-1", f"runtime[1]{publish.OLD_TAG}20200101-000000-1",
                               f"runtime[1]{publish.STAGING_TAG}v2", f"runtime[1]{publish.DELETING_TAG}1-0",
                               f"runtime1{publish.STAGING_TAG}1", f"runtime-cpu{publish.STAGING_TAG}v2")}
    for n, path in user.items():
        if "previous" in n:    # whole runtimes (copies of a real one): valid manifests, but not recorded
            shutil.copytree(cpu_runtime, path, symlinks=True)
        else:
            path.mkdir()
            (path / "notes.txt").write_text(f"mine: {n}\n")
    out = p / "runtime[1]"
    out.mkdir()     # an empty folder may be used
    before = {n: snapshot(path) for n, path in user.items()}
    said = []
    for _ in range(3):
        proc = assemble("build", "--recipe", "cpu", "--out", str(out), "--keep", "0")
        assert proc.returncode == 0, proc.stderr
        said.append(proc.stderr)
    assert "moved aside" not in said[1] and "removed the previous runtime beyond --keep 0" in said[1], said[1]
    assert {n: snapshot(path) for n, path in user.items()} == before
    assert sorted(os.listdir(p)) == sorted([*user, "runtime[1]"])   # no lock, no journal, no leftover
    assert whole(out)


def test_another_outputs_staging_folder_is_not_a_leftover(cpu_runtime, tmp_path):
    """A concurrent `--out 'rt?'` once removed the rt1.assembling-* folder of another build."""
    rt1 = publish.check_destination(tmp_path / "rt1", cache=TEST_CACHE / "cache")
    with publish.locked(rt1):
        staging = publish._make_staging(rt1)     # a build of rt1, in progress
        (staging.path / "half.so").write_bytes(b"\0" * 100)
        for _ in range(2):
            proc = assemble("build", "--recipe", "cpu", "--out", str(tmp_path / "rt?"), "--keep", "0")
            assert proc.returncode == 0, proc.stderr
        assert (staging.path / "half.so").read_bytes() == b"\0" * 100
        publish._discard(rt1, staging)   # rt1's own build removes it
    assert whole(tmp_path / "rt?") and sorted(os.listdir(tmp_path)) == ["rt?"]
