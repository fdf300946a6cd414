"""Sources: mirrors in order, unreachable ones handed over in seconds, every tree proven by git."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from builder.source import fetch as source
from builder.errors import AssembleError, BuildFailed
from builder.config.recipe import parse_recipe


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


def make_sdist(repo: Path, dest: Path, tamper: bool = False, escape: bool = False) -> Path:
    """An archive laid out like llama-cpp-python's sdist: vendor/llama.cpp plus its git module dir."""
    top = dest.parent / "pkg-1.0"
    vendored = top / "vendor" / "llama.cpp"
    shutil.copytree(repo, vendored, ignore=shutil.ignore_patterns(".git"))
    modules = top / ".git" / "modules" / "vendor" / "llama.cpp"
    shutil.copytree(repo / ".git", modules)
    subprocess.run(["git", "config", "--file", str(modules / "config"), "core.worktree", "../../../../vendor/llama.cpp"],
                   check=True)
    (vendored / ".git").write_text("gitdir: ../../.git/modules/vendor/llama.cpp\n")
    if tamper:
        (vendored / "ggml" / "a.c").write_text("int a = 666; /* not what the commit says */\n")
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(top, arcname="pkg-1.0")
        if escape:
            info = tarfile.TarInfo("pkg-1.0/vendor/llama.cpp/../../../../evil")
            data = b"x"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    shutil.rmtree(top)
    return dest


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
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
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


def test_tampered_sdist_tree_is_refused(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz", tamper=True)
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(hashlib.sha256(archive.read_bytes()).hexdigest())))
    with pytest.raises(BuildFailed) as err:
        source.pinned_tree(r)
    assert "differ from commit" in err.value.line() and "ggml/a.c" in err.value.line()
    assert not (isolated_cache / "sources" / sha).exists()


def test_sdist_path_escape_is_refused(upstream, isolated_cache, tmp_path, index_server, monkeypatch):
    repo, sha = upstream
    url, files = index_server
    (tmp_path / "dist").mkdir()
    archive = make_sdist(repo, tmp_path / "dist" / "pkg-1.0.tar.gz", escape=True)
    files["pkg-1.0.tar.gz"] = archive
    monkeypatch.setattr(source, "PYPI_SIMPLE", url)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(sha, sdist_mirror(hashlib.sha256(archive.read_bytes()).hexdigest())))
    with pytest.raises(BuildFailed) as err:
        source.pinned_tree(r)
    assert "escapes" in err.value.line()
    assert not (tmp_path / "evil").exists()


def test_local_source_must_match_the_pin(upstream, tmp_path):
    repo, sha = upstream
    first = git("rev-parse", "HEAD~1", cwd=repo)
    r = parse_recipe(tmp_path / "t.toml", recipe_text(first, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    with pytest.raises(AssembleError) as err:
        source.local_tree(str(repo), r)
    assert sha in err.value.line() and first in err.value.line() and "fix:" in err.value.line()
    r2 = parse_recipe(tmp_path / "t.toml", recipe_text(sha, f'[[pin.mirrors]]\nkind = "local"\npath = "{repo}"\n'))
    assert source.local_tree(str(repo), r2).provenance["kind"] == "local"
