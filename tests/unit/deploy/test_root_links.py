"""`assemble deploy --root` stays inside the image: an image whose etc/systemd, etc/sysusers.d and opt are
absolute links (as images have them) gets the unit, sysusers file and tree where the booted image will
find them, and nothing on the machine deploying it; a link loop is refused in one line before anything is
written; a root named through a link works with a model named through the same link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy.inroot import inside
from builder.errors import AssembleError
from tests.support.common import assemble, one_error_line
from tests.support.runtimes import make_runtime


def listing(folder: Path) -> dict[str, str | bytes]:
    out = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(dirpath) / name
            out[str(p)] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return out


@pytest.fixture
def linked_image(tmp_path) -> tuple[Path, Path, Path]:
    """(image root, "the host", the model in the image): the image's etc/systemd, etc/sysusers.d and opt are
    absolute links to folders that exist both in the image and on "the host"."""
    host, root = tmp_path / "host", tmp_path / "img"
    for where in (host, root):
        for sub in ("usr/lib/systemd/system", "usr/lib/sysusers.d", "var/opt"):
            (where / sub).mkdir(parents=True)
    (root / "etc").mkdir()
    os.symlink(host / "usr/lib/systemd", root / "etc/systemd")     # what /usr/lib/systemd is on this machine
    os.symlink(host / "usr/lib/sysusers.d", root / "etc/sysusers.d")
    os.symlink(host / "var/opt", root / "opt")
    (root / "srv").mkdir()
    return root, host, write_tiny_llama(root / "srv" / "tiny.gguf")


@pytest.mark.parametrize("image_holds_targets", [True, False])
def test_absolute_links_in_the_image_are_read_from_its_root(linked_image, tmp_path, image_holds_targets):
    root, host, model = linked_image
    # the links name "the host" by its path on this machine: read from the image's root, that is
    # img/<host path>; the image holds those folders, or deploy makes them (inside the image)
    for sub in ("usr/lib/systemd/system", "usr/lib/sysusers.d", "var/opt") if image_holds_targets else ():
        (root / str(host / sub).lstrip("/")).mkdir(parents=True)
    before = listing(host)
    proc = assemble("deploy", str(make_runtime(tmp_path / "rt")), "--name", "chat", "--model", str(model),
                    "--root", str(root))
    assert proc.returncode == 0, proc.stderr
    assert listing(host) == before                                     # nothing on "the host"
    inner = root / str(host).lstrip("/")
    assert (inner / "usr/lib/systemd/system/assemble-chat.service").is_file()
    assert (inner / "usr/lib/sysusers.d/assemble-chat.conf").is_file()
    assert (inner / "var/opt/assemble/chat/current/serve").is_file()
    status = assemble("deploy", "--status", "chat", "--root", str(root))
    assert status.returncode == 0, status.stderr
    assert listing(host) == before


def test_links_the_image_cannot_resolve_are_refused_before_anything_is_written(linked_image, tmp_path):
    """opt -> /HOST/var/opt read inside the image: a folder the image lacks is made inside the image; a link
    loop (opt -> /opt) is refused in one line."""
    root, host, model = linked_image
    (root / "opt").unlink()
    os.symlink("/opt", root / "opt")                                   # inside the image: itself
    before, image_before = listing(host), listing(root)
    proc = assemble("deploy", str(make_runtime(tmp_path / "rt")), "--name", "chat", "--model", str(model),
                    "--root", str(root))
    one_error_line(proc, 2, ["/opt/assemble/chat in the image cannot be resolved inside --root", "loop"])
    assert listing(host) == before and listing(root) == image_before


def test_a_root_named_through_a_link_takes_a_model_through_the_same_link(tmp_path):
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    (root / "srv").mkdir()
    write_tiny_llama(root / "srv" / "tiny.gguf")
    os.symlink(root, tmp_path / "link")
    proc = assemble("deploy", str(make_runtime(tmp_path / "rt")), "--name", "chat",
                    "--model", str(tmp_path / "link/srv/tiny.gguf"), "--root", str(tmp_path / "link"))
    assert proc.returncode == 0, proc.stderr
    rid = proc.stdout.strip()
    env = (root / "opt/assemble/chat/releases" / rid / "env").read_text()
    assert "LLAMA_ARG_MODEL='/srv/tiny.gguf'" in env and str(tmp_path) not in env


def test_inside(tmp_path):
    root = tmp_path / "r"
    (root / "a/b").mkdir(parents=True)
    os.symlink("/a", root / "abs")
    os.symlink("../../..", root / "a/b/up")
    os.symlink("b", root / "a/rel")
    assert inside(root, "abs/b/new/x") == root / "a/b/new/x"
    assert inside(root, "a/b/up/a") == root / "a"                 # `..` stops at the root
    assert inside(root, "../../a/rel") == root / "a/b"
    assert inside(root, "/missing/../a") == root / "a"
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    with pytest.raises(AssembleError, match="links loop"):
        inside(root, "loop1/x")
