"""Sources: mirrors in order, unreachable ones handed over in seconds, every tree proven by git."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from builder.config.recipe import parse_recipe
from builder.errors import AssembleError, BuildFailed
from builder.source import fetch as source


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path) -> tuple[Path, str]:
    """A tiny llama.cpp-shaped repository with two commits; returns (repo, sha of the second)."""
    repo = tmp_path / "upstream"
    (repo / "ggml").mkdir(parents=True)
    git("init", "-q", cwd=repo)
    git("config", "user.email", "t@example.invalid", cwd=repo)
    git("config", "user.name", "t", cwd=repo)
    (repo / "CMakeLists.txt").write_text("project(x)\n")
    (repo / "ggml" / "a.c").write_text("int a;\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "one", cwd=repo)
    (repo / "ggml" / "b.c").write_text("int b;\n")
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "two", cwd=repo)
    return repo, git("rev-parse", "HEAD", cwd=repo)


def recipe_text(sha: str, mirrors: str) -> str:
    return f'name = "t"\ndescription = "t"\nbackends = ["cpu"]\n[pin]\nsha = "{sha}"\n{mirrors}'


def make_sdist(repo: Path, dest: Path, tamper: bool = False, escape: bool = False,
               links: tuple[tuple[str, str], ...] = (), module_config: str = "", swap_tree: bool = False) -> Path:
    """An archive laid out like llama-cpp-python's sdist: vendor/llama.cpp plus its git module dir.
    links: extra symlink members (name, target) appended; module_config: appended to the module's
    git config; swap_tree: the ggml/ tree object is replaced by one that also lists an added file."""
    top = dest.parent / "pkg-1.0"
    vendored = top / "vendor" / "llama.cpp"
    shutil.copytree(repo, vendored, ignore=shutil.ignore_patterns(".git"))
    modules = top / ".git" / "modules" / "vendor" / "llama.cpp"
    shutil.copytree(repo / ".git", modules)
    subprocess.run(["git", "config", "--file", str(modules / "config"), "core.worktree", "../../../../vendor/llama.cpp"],
                   check=True)
    with open(modules / "config", "a") as f:
        f.write(module_config)
    (vendored / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    if tamper:
        (vendored / "ggml" / "a.c").write_text("int a = 666; /* not what the commit says */\n")
    if swap_tree:
        swap_subtree(modules, vendored)
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(top, arcname="pkg-1.0")
        if escape:
            info = tarfile.TarInfo("pkg-1.0/vendor/llama.cpp/../../../../evil")
            data = b"x"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    shutil.rmtree(top)
    return dest


def swap_subtree(gitdir: Path, worktree: Path) -> None:
    """Overwrite HEAD's ggml/ tree object (a loose file) with another tree that also lists
    ggml/evil.c, and put that file in the worktree: the commit object stays intact."""
    env = {"GIT_DIR": str(gitdir), "PATH": os.environ["PATH"]}

    def g(*args, stdin=None):
        return subprocess.run(["git", *args], env=env, input=stdin, check=True, capture_output=True,
                              text=True).stdout.strip()

    old = g("rev-parse", "HEAD:ggml")
    evil = "int evil;\n"
    (worktree / "ggml" / "evil.c").write_text(evil)
    blob = g("hash-object", "-w", "--stdin", stdin=evil)
    listing = g("ls-tree", old) + f"\n100644 blob {blob}\tevil.c\n"
    new = g("mktree", stdin=listing)
    target = gitdir / "objects" / old[:2] / old[2:]
    target.chmod(0o644)
    shutil.copyfile(gitdir / "objects" / new[:2] / new[2:], target)


@pytest.fixture
def index_server(tmp_path):
    """A PyPI 'simple' JSON index on 127.0.0.1 serving files from a folder."""
    files: dict[str, Path] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.startswith("/simple/pkg/"):
                body = json.dumps({"files": [{"filename": n, "url": f"http://127.0.0.1:{port}/files/{n}",
                                              "hashes": {"sha256": hashlib.sha256(p.read_bytes()).hexdigest()}}
                                             for n, p in files.items()]}).encode()
            elif self.path.startswith("/files/") and self.path[7:] in files:
                body = files[self.path[7:]].read_bytes()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{port}/simple", files
    httpd.shutdown()


def sdist_mirror(sha256: str) -> str:
    return (f'[[pin.mirrors]]\nkind = "sdist"\npackage = "pkg"\nversion = "1.0"\nsha256 = "{sha256}"\n'
            f'subdir = "vendor/llama.cpp"\n')


def test_unreachable_mirror_hands_over_in_seconds(upstream, isolated_cache, tmp_path, capsys):
    repo, sha = upstream
    text = recipe_text(sha, '[[pin.mirrors]]\nkind = "git"\nurl = "https://unreachable.invalid/llama.cpp.git"\n'
                            f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n')
    r = parse_recipe(tmp_path / "t.toml", text)
    t0 = time.monotonic()
    tree = source.pinned_tree(r)
    assert time.monotonic() - t0 < 15
    assert tree.sha == sha and (tree.path / "ggml" / "b.c").is_file()
    err = capsys.readouterr().err
    assert "unreachable.invalid" in err and "trying the next one" in err
    # The second call comes from the cache, mirrors untouched.
    assert source.pinned_tree(r).path == tree.path


def test_sdist_mirror_verified_by_git(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz")
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(digest)))
    tree = source.pinned_tree(r)
    assert tree.provenance["kind"] == "sdist" and tree.provenance["sha256"] == digest
    assert git("rev-parse", "HEAD", cwd=tree.path) == sha


def test_sdist_with_wrong_sha256_is_refused(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    files["pkg-1.0.tar.gz"] = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz")
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror("0" * 64)))
    with pytest.raises(BuildFailed) as err:
        source.pinned_tree(r)
    assert "sha256" in err.value.line()
    assert not (isolated_cache / "sources" / sha).exists()


@pytest.mark.parametrize("harm, words", [({"tamper": True}, ("differ from commit", "ggml/a.c")),
                                         ({"escape": True}, ("escapes",))], ids=["tampered-tree", "path-escape"])
def test_a_harmful_sdist_is_refused_in_one_line(harm, words, upstream, isolated_cache, tmp_path, index_server,
                                                monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz", **harm)
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(hashlib.sha256(archive.read_bytes()).hexdigest())))
    with pytest.raises(BuildFailed) as err:
        source.pinned_tree(r)
    line = err.value.line()
    assert all(w in line for w in words) and "\n" not in line, line
    assert not (isolated_cache / "sources" / sha).exists() and not (tmp_path / "evil").exists()


def _truncate(archive: Path) -> None:
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) * 2 // 3])


# (what makes the sdist hostile or broken, what the warning must say)
HOSTILE_SDISTS = {
    # inside the archive before its top folder is stripped, one level above the extraction folder after
    "link-escapes-after-strip": ({"links": (("pkg-1.0/vendor/llama.cpp/ggml/evil", "../../../../x"),)},
                                 "points outside the extraction folder"),
    "link-in-git-metadata": ({"links": (("pkg-1.0/.git/modules/vendor/llama.cpp/refs/x", "../HEAD"),)},
                             "the git metadata holds a symlink"),
    "swapped-subtree-object": ({"swap_tree": True}, "git fsck failed"),
    "truncated-archive": ({"damage": _truncate}, "unreadable archive"),
}


@pytest.mark.parametrize("case", HOSTILE_SDISTS)
def test_hostile_sdist_hands_over_to_the_next_mirror(case, upstream, isolated_cache, tmp_path, index_server,
                                                     monkeypatch, capsys):
    """First mirror: an sdist whose sha256 the recipe pins, but hostile or broken. Second: a
    local git mirror. One warning line names the first; the tree comes from the second."""
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    options, expected = dict(HOSTILE_SDISTS[case][0]), HOSTILE_SDISTS[case][1]
    damage = options.pop("damage", None)
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz", **options)
    if damage:
        damage(archive)
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(digest) +
                                                      f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    tree = source.pinned_tree(r)
    assert tree.provenance["kind"] == "git" and tree.provenance["url"] == str(repo)
    assert git("rev-parse", "HEAD", cwd=tree.path) == sha and not (tree.path / "ggml" / "evil").exists()
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 1, warnings
    assert "mirror sdist pkg==1.0 failed" in warnings[0] and expected in warnings[0], warnings[0]
    assert "trying the next one" in warnings[0]
    # nothing left over from the refused mirror (no extraction folder)
    assert {p.name for p in (isolated_cache / "sources").iterdir()} == {sha, f"{sha}.json", f".{sha}.lock"}
    assert not (tmp_path / "x").exists()


def test_all_mirrors_failing_is_one_line(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz")
    _truncate(archive)
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(digest) +
                                                      f'[[pin.mirrors]]\nkind = "local"\npath = "{tmp_path}"\n'))
    with pytest.raises(BuildFailed) as err:
        source.pinned_tree(r)
    line = err.value.line()
    assert "\n" not in line and err.value.code == 1
    assert "sdist pkg==1.0: its archive pkg-1.0.tar.gz was refused: unreadable archive" in line
    assert f"local {tmp_path}: " in line and "not a git repository" in line


def test_sdist_git_metadata_runs_nothing(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    """The module's git config comes from the archive: a core.fsmonitor command in it must
    not run while the tree is verified, and the cached tree keeps none of that config."""
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    marker = tmp_path / "ran"
    hook = tmp_path / "fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    included = tmp_path / "included.config"  # what an includeIf of the archive's config pulls in
    included.write_text(f"[core]\n\tfsmonitor = {hook}\n")
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz",
                         module_config=f"[core]\n\tfsmonitor = {hook}\n[includeIf \"gitdir:/\"]\n\tpath = {included}\n")
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(hashlib.sha256(archive.read_bytes()).hexdigest())))
    tree = source.pinned_tree(r)
    assert tree.provenance["kind"] == "sdist"
    assert not marker.exists()
    config = (tree.path / ".git" / "config").read_text()
    assert "fsmonitor" not in config and "includeIf" not in config and "worktree" not in config
    assert not (tree.path / ".git" / "hooks").exists()


def test_local_source_must_match_the_pin(upstream, tmp_path):
    repo, sha = upstream
    first = git("rev-parse", "HEAD~1", cwd=repo)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(first, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    with pytest.raises(AssembleError) as err:
        source.local_tree(str(repo), r)
    assert sha in err.value.line() and first in err.value.line() and "fix:" in err.value.line()
    r2 = parse_recipe(tmp_path / "t.toml", recipe_text(sha, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    assert source.local_tree(str(repo), r2).provenance["kind"] == "local"


def test_a_plain_tree_inside_another_repository_is_local_not_that_repository(upstream, tmp_path):
    """vendor/llama.cpp without its own .git inside a project's repository: recorded as a local tree,
    never judged by the outer repository's HEAD."""
    repo, sha = upstream
    vendored = repo / "vendor" / "llama.cpp"
    (vendored / "ggml").mkdir(parents=True)
    (vendored / "CMakeLists.txt").write_text("project(x)\n")
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    tree = source.local_tree(str(vendored), r)
    assert tree.sha is None and tree.provenance == {"kind": "local", "path": str(vendored),
                                                    "verified_by": "nothing (not git)"}


def test_no_git_is_one_line_naming_git_not_the_network(upstream, tmp_path, monkeypatch):
    repo, sha = upstream
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AssembleError) as err:
        source.local_tree(str(repo), r)
    assert "git is not installed" in err.value.line() and "install git" in err.value.line()
