"""`package` is the gate for shipping: it refuses every runtime `verify --static` fails, with verify's
own lines, and it never replaces a file in --out-dir that no run of it wrote.

The refusals of a damaged runtime use copies of the real cpu runtime (the warm test cache: no
compile), each damaged with a real tool and its manifest rewritten around the damage, so the
file checks pass and only verify's deeper checks can catch it. The --out-dir tests use the small
runtime of tests/support/runtimes.py and run in seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.release import package, provenance
from builder.runtime.manifest import Manifest
from tests.support.common import assemble, one_error_line
from tests.support.manifests import read_raw, write_raw
from tests.support.runtimes import make_runtime


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: a file's bytes, a link's target (what "untouched" compares)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


# --- the gate: what verify --static fails is never archived ----------------------------------


# --- --out-dir: only what package wrote is ever replaced ------------------------------------

def _outputs(rt: Path, fmt: str = package.DEFAULT_FORMAT) -> dict[str, str]:
    stem = package.archive_stem(rt, Manifest.load(rt))
    return {"the archive": f"{stem}.{fmt}", "the SBOM": f"{stem}.cdx.json",
            "the provenance": f"{stem}{provenance.SUFFIX}", "SHA256SUMS": package.SUMS}


@pytest.mark.parametrize("output", ["the archive", "the SBOM", "the provenance", "SHA256SUMS"])
def test_a_users_file_with_an_outputs_name_is_refused_before_anything_is_written(tmp_path, isolated_cache, output):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    dist.mkdir()
    mine = dist / _outputs(rt)[output]
    mine.write_text("0" * 64 + "  my-own-release.tar.gz\n")    # even in sha256sum's format: it is the user's
    proc = assemble("package", str(rt), "--out-dir", str(dist))
    one_error_line(proc, 2, [str(mine), "not written by assemble package", "never replaced", "another --out-dir",
                             "move that file away"])
    assert _tree(dist) == {mine.name: b"0" * 64 + b"  my-own-release.tar.gz\n"}


def test_a_symlink_with_the_archives_name_is_refused_and_its_target_kept(tmp_path, isolated_cache):
    rt = make_runtime(tmp_path)
    dist, target = tmp_path / "dist", tmp_path / "precious.bin"
    dist.mkdir()
    target.write_bytes(b"precious")
    (dist / _outputs(rt)["the archive"]).symlink_to(target)
    one_error_line(assemble("package", str(rt), "--out-dir", str(dist)), 2, ["never replaced"])
    assert _tree(dist) == {_outputs(rt)["the archive"]: str(target)} and target.read_bytes() == b"precious"


def test_a_rerun_replaces_its_own_outputs_and_keeps_other_archives_lines(tmp_path, isolated_cache):
    cpu, other = make_runtime(tmp_path / "a"), make_runtime(tmp_path / "b", name="other")
    dist = tmp_path / "dist"
    first = package.package(cpu, dist)
    package.package(other, dist)
    again = package.package(cpu, dist)       # every output of cpu is there already, written by the first run
    assert again.archive.read_bytes() == first.archive.read_bytes()
    listed = sorted(line.split("  ")[1] for line in (dist / package.SUMS).read_text().splitlines())
    assert listed == sorted([*(n for n in _outputs(cpu).values() if n != package.SUMS),
                             *(n for n in _outputs(other).values() if n != package.SUMS)])
    assert subprocess.run(["sha256sum", "--strict", "-c", package.SUMS], cwd=dist,
                          capture_output=True).returncode == 0


def _rewrite_in_place(p: Path) -> None:
    with open(p, "r+b") as f:                # the same inode, other bytes
        f.write(b"edited")


def _made_anew(p: Path) -> None:
    p.unlink()
    p.write_bytes(b"mine")                   # a new file of the same name (the inode number may come back)


def _forget(p: Path) -> None:
    shutil.rmtree(Path(os.environ["ASSEMBLE_CACHE"]) / "packages")   # the record of the earlier run is gone


@pytest.mark.parametrize("change", [_rewrite_in_place, _made_anew, _forget], ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("output", ["the archive", "SHA256SUMS"])
def test_an_output_changed_or_unproven_since_the_run_that_wrote_it_is_the_users(tmp_path, isolated_cache,
                                                                                 change, output):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    package.package(rt, dist)
    changed = dist / _outputs(rt)[output]
    change(changed)
    before = _tree(dist)
    named = dist / _outputs(rt)["the archive"] if change is _forget else changed   # forgotten: the first is named
    one_error_line(assemble("package", str(rt), "--out-dir", str(dist)), 2, [str(named), "never replaced"])
    assert _tree(dist) == before


# --- where the runtime came from ---------------------------------------------------------------

def test_a_repaired_runtime_without_a_date_gets_a_hint_for_prebuilt_binaries(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    rt = make_runtime(tmp_path, commit_time=None)
    raw = read_raw(rt)
    raw["llama_cpp"]["source"] = {"kind": "prebuilt", "path": str(tmp_path / "llama-b7416-bin-ubuntu-x64.zip"),
                                  "verified_by": "nothing: prebuilt binaries"}
    write_raw(rt, {k: v for k, v in raw.items() if k not in ("schema", "created_by")})
    line = one_error_line(assemble("package", str(rt), "--out-dir", str(tmp_path / "dist")), 2,
                          ["repaired from prebuilt binaries", "SOURCE_DATE_EPOCH", "upstream release"])
    assert "git" not in line and "build from" not in line
    assert not (tmp_path / "dist").exists()


class _Killed(BaseException):
    """A kill at one instant of a run (only the run's own `finally` clean-up still happens)."""


@pytest.mark.parametrize("instant", ["before the archive's rename", "after the archive's rename"])
def test_a_run_killed_at_the_rename_leaves_its_outputs_replaceable(tmp_path, isolated_cache, monkeypatch, instant):
    rt = make_runtime(tmp_path)
    dist = tmp_path / "dist"
    first = package.package(rt, dist)
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == first.archive and instant == "before the archive's rename":
            raise _Killed
        real_replace(src, dst)
        if Path(dst) == first.archive:      # renamed, the ledger not yet told
            raise _Killed

    monkeypatch.setattr(package.os, "replace", replace)
    with pytest.raises(_Killed):
        package.package(rt, dist)
    monkeypatch.setattr(package.os, "replace", real_replace)
    again = assemble("package", str(rt), "--out-dir", str(dist))    # whichever file is there is provably ours
    assert again.returncode == 0, again.stderr
    assert sorted(os.listdir(dist)) == sorted(_outputs(rt).values())
