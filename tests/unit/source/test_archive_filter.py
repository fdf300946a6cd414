"""builder.source.archive.extract_members alone (no planning before it), on hostile archives, with
tarfile's own "data" filter where this interpreter has one (3.11.4+) and with ours forced (what
Python 3.11.0-3.11.3, e.g. Debian 12's 3.11.2, run): the same properties hold for both.
Nothing is written outside the destination, and what is written has no device, no setuid/setgid
bit, no group/other write bit and no owner taken from the archive."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from builder.source import archive as A
from builder.source.archive import ArchiveRefused, extract_members
from tests.unit.source.test_archive import Box, assert_contained, snapshot

# ours always; tarfile's where it exists (it is what ours must equal)
FILTERS = ["own"] + (["stdlib"] if hasattr(tarfile, "data_filter") else [])


@pytest.fixture(params=FILTERS)
def which(request, monkeypatch) -> str:
    monkeypatch.setattr(A, "STDLIB_FILTER", request.param == "stdlib")
    return request.param


@pytest.fixture
def box(tmp_path) -> Box:
    b = Box(tmp_path)
    b.dest.mkdir()
    return b


def member(name: str, kind: str = "file", payload: str = "data", mode: int = 0o644, **attrs) -> tuple:
    info = tarfile.TarInfo(name)
    info.mode = mode
    for key, value in attrs.items():
        setattr(info, key, value)
    data = b""
    if kind == "file":
        data = payload.encode()
        info.size = len(data)
    else:
        info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                     "fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}[kind]
        info.linkname = payload if kind in ("symlink", "hardlink") else ""
    return info, data


def write(box: Box, *members: tuple) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    return box.write(buf.getvalue(), "a.tar")


def extract(path: Path, dest: Path) -> None:
    with tarfile.open(path, errorlevel=2) as tar:
        extract_members(tar, dest)


def run(box: Box, *members: tuple) -> None:
    extract(write(box, *members), box.dest)


def refused(box: Box, *members: tuple, expect: str = "", planted: bool = False) -> None:
    path = write(box, *members)
    before = snapshot(box.root, box.dest)
    with pytest.raises((ArchiveRefused, *([tarfile.FilterError] if hasattr(tarfile, "FilterError") else []))) as err:
        extract(path, box.dest)
    assert expect.lower() in str(err.value).lower()
    assert snapshot(box.root, box.dest) == before   # nothing outside dest changed
    if not planted:                                 # (a test's own link leaving dest is not the archive's)
        assert_contained(box.dest)


def test_a_plain_archive_is_extracted(which, box):
    run(box, member("d", "dir", mode=0o755), member("d/a.txt", payload="hello"), member("d/l", "symlink", "a.txt"),
        member("d/h", "hardlink", "d/a.txt"), member("d/sub/x", payload="x"))
    d = box.dest
    assert (d / "d/l").read_text() == "hello" and os.readlink(d / "d/l") == "a.txt"
    assert os.path.samefile(d / "d/h", d / "d/a.txt") and (d / "d/sub/x").read_text() == "x"


@pytest.mark.parametrize("name", ["../x", "d/../../x", "a/b/../../../x"])
def test_dotdot_names_leaving_dest(which, box, name):
    refused(box, member(name, payload="evil"), expect="outside the destination")


def test_absolute_names(which, box):
    """tarfile strips the leading / (and extracts inside dest); ours refuses the name. Either way the
    file outside is untouched."""
    target = str(box.sentinel / "keep.txt")
    if which == "own":
        refused(box, member(target, payload="evil"), expect="absolute")
    else:
        run(box, member(target, payload="evil"))
        assert (box.dest / target.lstrip("/")).read_text() == "evil"
    assert (box.sentinel / "keep.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("target", ["../x", "../../d7/sentinel/keep.txt", "a/../../x", "@ABS@"])
def test_symlinks_leaving_dest(which, box, target):
    target = target.replace("@ABS@", str(box.sentinel / "keep.txt"))
    refused(box, member("l", "symlink", target))


@pytest.mark.parametrize("target", ["../x", "@ABS@"])
def test_hard_links_leaving_dest(which, box, target):
    target = target.replace("@ABS@", str(box.sentinel / "keep.txt"))
    refused(box, member("h", "hardlink", target))


def test_writing_through_a_link_written_before(which, box):
    """`up` -> .. is refused; so is a later name that would go through an earlier link leaving dest:
    the filter reads the disk as it is when each member comes."""
    refused(box, member("up", "symlink", ".."))
    os.symlink("..", box.dest / "up")                       # as if an earlier member had made it
    refused(box, member("up/x", payload="evil"), expect="outside the destination", planted=True)
    refused(box, member("h", "hardlink", "up/x"), planted=True)
    assert (box.dest.parent / "x").read_text() == "beside dest\n"


@pytest.mark.parametrize("kind", ["chr", "blk", "fifo"])
def test_special_files(which, box, kind):
    refused(box, member("dev", kind, mode=0o666), expect="special")
    assert not os.path.lexists(box.dest / "dev")


def test_modes_and_owners(which, box):
    """setuid/setgid/sticky and group/other write bits go, the owner can read and write its files, a file
    the owner cannot run loses every execute bit, and the archive's owner is never applied (we are root
    in CI: tarfile alone would chown to 4242)."""
    run(box, member("d", "dir", mode=0o7777, uid=4242, gid=4242, uname="nobody-such", gname="nobody-such"),
        member("d/suid", mode=0o6777, uid=4242, gid=4242, uname="root", gname="root"),
        member("d/none", mode=0o000), member("d/gx", mode=0o075), member("d/ux", mode=0o700))
    d = box.dest / "d"
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in [d, *d.iterdir()]}
    assert modes["suid"] == 0o755 and modes["none"] == 0o600 and modes["gx"] == 0o644 and modes["ux"] == 0o700
    assert not modes["d"] & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | 0o022) and modes["d"] & 0o700 == 0o700
    assert {p.lstat().st_uid for p in [d, *d.iterdir()]} == {os.geteuid()}
    assert {p.lstat().st_gid for p in [d, *d.iterdir()]} == {os.getegid()}


def test_own_filter_on_this_interpreter_keeps_the_stdlib_switch_honest():
    """The switch says what this interpreter has: ours runs exactly where tarfile lacks the filter."""
    assert A.STDLIB_FILTER == hasattr(tarfile, "data_filter") == hasattr(tarfile.TarInfo, "replace")
