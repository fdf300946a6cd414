"""Fetch, verify and cache the llama.cpp source tree at the pinned sha.

Three kinds of source, tried in the recipe's mirror order:
- git: fetch exactly the pinned commit, verify it, export its tree;
- sdist: a PyPI source archive that vendors llama.cpp together with its git
  metadata (llama-cpp-python), checked by sha256 and then by git itself;
- local: a directory given with --source, recorded as such.

A verified tree lands in <cache>/sources/<sha>/ and is never modified afterwards
(patches work on a copy). An unreachable mirror fails within seconds and hands
over to the next one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from builder import locks, paths, ui
from builder.proc import git, last_line
from builder.errors import AssembleError, BuildFailed
from builder.digest import sha256_file
from builder.toolchain.provision import fetch_verified
from builder.paths import cache_dir
from builder.config.recipe import Mirror, Recipe
from builder.source.archive import ArchiveRefused, extract

CONNECT_TIMEOUT = 5.0
PYPI_SIMPLE = os.environ.get("ASSEMBLE_PYPI_SIMPLE", "https://pypi.org/simple")


@dataclass(frozen=True)
class SourceTree:
    path: Path
    sha: str | None        # None only for a local tree that is not a git checkout
    provenance: dict[str, Any]       # how the tree was obtained and verified (goes into the manifest)


class MirrorFailed(Exception):
    """This mirror cannot give the pinned tree; try the next one."""


def _git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    """stdout of git, or MirrorFailed with its last line: this mirror is done, try the next."""
    proc = git(*args, cwd=cwd, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise MirrorFailed(f"git {args[0]} failed: {last_line(proc)}")
    return str(proc.stdout)


def _reachable(url: str) -> None:
    """Fail in seconds, not minutes, when a host cannot be reached."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return
    host = parsed.hostname
    port = parsed.port or {"https": 443, "http": 80, "ssh": 22, "git": 9418}.get(parsed.scheme, 443)
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise MirrorFailed(f"cannot reach {host}:{port} ({exc.strerror or exc})") from None


def verify_git_tree(tree: Path, sha: str) -> dict[str, Any]:
    """Prove with git that `tree` is exactly commit `sha`: HEAD, the commit's own hash, every file."""
    head = _git("rev-parse", "HEAD", cwd=tree).strip()
    if head != sha:
        raise MirrorFailed(f"tree is at {head}, not the pinned {sha}")
    body = git("cat-file", "commit", sha, cwd=tree, text=False).stdout
    computed = hashlib.sha1(b"commit %d\0" % len(body) + body, usedforsecurity=False).hexdigest()
    if computed != sha:
        raise MirrorFailed(f"commit object of {sha} is missing or corrupt (hashes to {computed})")
    # read-tree re-hashes only the top tree: a swapped subtree object would pass
    # unnoticed (files added or changed under it), so every object is re-hashed first.
    _git("fsck", "--no-dangling", "--no-progress", cwd=tree)
    # Compare every file with the commit's tree through a fresh index, so the
    # archive's own index is not trusted; --ignored, so no ignore rule hides an added file.
    with paths.scratch("verify-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git("read-tree", sha, cwd=tree, env=env)
        status = _git("status", "--porcelain", "--untracked-files=all", "--ignored", cwd=tree, env=env)
    if status.strip():
        changed = status.strip().splitlines()
        raise MirrorFailed(f"{len(changed)} file(s) differ from commit {sha[:12]}, e.g. {changed[0].strip()}")
    return {"verified_by": "git: HEAD, commit object hash, fsck of every object, every file against the commit tree"}


def _sdist_url(m: Mirror) -> str:
    import requests                               # here: the CLI starts without loading it
    index = f"{PYPI_SIMPLE.rstrip('/')}/{m.package}/"
    _reachable(index)
    try:
        resp = requests.get(index, headers={"Accept": "application/vnd.pypi.simple.v1+json"},
                            timeout=(CONNECT_TIMEOUT, 30))
        resp.raise_for_status()
        files = resp.json()["files"]
    except (requests.RequestException, ValueError, KeyError) as exc:
        raise MirrorFailed(f"PyPI index for {m.package} unusable ({exc})") from None
    norm = m.field("package").replace("-", "_").lower()
    names = (f"{norm}-{m.version}.tar.gz", f"{m.field('package').lower()}-{m.version}.tar.gz")
    # An index is someone else's JSON: entries of the wrong shape are skipped, not trusted.
    for f in files if isinstance(files, list) else ():
        if not isinstance(f, dict) or not isinstance(f.get("url"), str) or not isinstance(f.get("filename"), str):
            continue
        if f["filename"].lower() in names:
            hashes = f.get("hashes")
            listed = hashes.get("sha256") if isinstance(hashes, dict) else None
            if listed not in (None, m.sha256):
                raise MirrorFailed(f"PyPI lists sha256 {listed} for {f['filename']}, the recipe pins {m.sha256}")
            return str(f["url"])
    raise MirrorFailed(f"no sdist {m.package}=={m.version} on the index")


def _sdist_archive(m: Mirror) -> Path:
    """The mirror's archive in the download cache, its sha256 checked."""
    downloads = cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / f"{m.package}-{m.version}.tar.gz"
    if not archive.is_file() or sha256_file(archive) != m.sha256:  # the index is asked only when needed
        import requests
        try:
            fetch_verified(_sdist_url(m), archive, m.field("sha256"), None, requests.Session(),
                           other_mirror="the next mirror of the recipe is tried")
        except BuildFailed as exc:
            raise MirrorFailed(exc.what) from None
    return archive


# The archive's git metadata is someone else's too: its config can run commands
# (core.fsmonitor, filter drivers, includeIf of a local file; the real sdist's has
# includeIf paths of its CI machine), its hooks run when an index is written, and
# info/exclude could hide an added file. Git gets a config of ours and none of those.
_GIT_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
_GIT_DROPPED = ("config", "config.worktree", "hooks", "info", "commondir", "objects/info/alternates")


def _neutralise_gitdir(gitdir: Path) -> None:
    for folder, dirs, files in os.walk(gitdir):
        for name in dirs + files:
            if os.path.islink(os.path.join(folder, name)):
                rel = os.path.relpath(os.path.join(folder, name), gitdir)
                raise MirrorFailed(f"the git metadata holds a symlink ({rel}); a git folder never does")
    for name in _GIT_DROPPED:
        path = gitdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (gitdir / "config").write_text(_GIT_CONFIG)


def _from_sdist(m: Mirror, sha: str, dest: Path) -> dict[str, Any]:
    archive = _sdist_archive(m)
    subdir = m.field("subdir").strip("/")
    wanted = (subdir, f".git/modules/{subdir}")
    with paths.scratch("extract-") as tmp:     # in the cache: a killed run's copy is removed by the next
        root = Path(tmp) / "sdist"
        try:
            extract(archive, root, wanted)
        except ArchiveRefused as exc:
            raise MirrorFailed(f"its archive {archive.name} was refused: {exc}") from None
        gitfile = root / subdir / ".git"
        if not (root / wanted[1]).is_dir() or not gitfile.is_file():
            raise MirrorFailed(f"{archive.name} has no git metadata for {subdir}; it cannot be verified")
        # Make the tree self-contained: the module's git dir moves inside it (the
        # submodule's core.worktree, pointing at the superproject, goes with the config).
        gitfile.unlink()
        os.rename(root / wanted[1], gitfile)
        _neutralise_gitdir(gitfile)
        proof = verify_git_tree(root / subdir, sha)
        os.replace(root / subdir, dest)
    return {"kind": "sdist", "package": m.package, "version": m.version, "sha256": m.sha256,
            "subdir": subdir, **proof}


def _from_git(m: Mirror, sha: str, dest: Path) -> dict[str, Any]:
    _reachable(m.field("url"))
    dest.mkdir()
    _git("init", "-q", cwd=dest)
    # A slow or silent server must not hold the build for minutes.
    _git("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=20",
         "fetch", "--depth", "1", "--no-tags", m.field("url"), sha, cwd=dest, timeout=1800)
    _git("-c", "advice.detachedHead=false", "checkout", "-q", sha, cwd=dest)
    proof = verify_git_tree(dest, sha)
    return {"kind": "git", "url": m.url, **proof}


def _from_local_mirror(m: Mirror, sha: str, dest: Path) -> dict[str, Any]:
    """A mirror that is a git repository on this machine (a clone, a shallow copy, a site mirror)."""
    src = Path(m.field("path")).expanduser().resolve()
    if not (src / ".git").exists() and not (src / "HEAD").is_file():
        raise MirrorFailed(f"{src} is not a git repository")
    dest.mkdir()
    _git("init", "-q", cwd=dest)
    # file:// and --depth 1 let git serve one commit even from a shallow repository.
    _git("fetch", "-q", "--depth", "1", "--no-tags", f"file://{src}", sha, cwd=dest)
    _git("-c", "advice.detachedHead=false", "checkout", "-q", sha, cwd=dest)
    return {"kind": "git", "url": str(src), **verify_git_tree(dest, sha)}


_FETCHERS = {"git": _from_git, "sdist": _from_sdist, "local": _from_local_mirror}


def cached_tree(sha: str) -> SourceTree | None:
    """The verified tree at sha if the cache has it (reads only)."""
    root = cache_dir() / "sources"
    dest, stamp = root / sha, root / f"{sha}.json"
    if dest.is_dir() and stamp.is_file():
        try:
            return SourceTree(dest, sha, json.loads(stamp.read_text()))
        except (OSError, ValueError):   # a stamp of an older version written half: the tree is fetched again
            return None
    return None


def pinned_tree(recipe: Recipe, sha: str | None = None) -> SourceTree:
    """The verified tree at the recipe's sha, from the cache or the first mirror that works."""
    sha = sha or recipe.pin.sha
    cached = cached_tree(sha)
    if cached:
        return cached
    root = cache_dir() / "sources"
    root.mkdir(parents=True, exist_ok=True)
    # Builds of other recipes at this sha fetch into the same folder: one at a time.
    with locks.exclusive(root / f".{sha}.lock", f"waiting for another assemble run fetching {sha[:12]} ..."):
        return cached_tree(sha) or _fetch_pinned(recipe, sha, root)


def _fetch_pinned(recipe: Recipe, sha: str, root: Path) -> SourceTree:
    dest = root / sha
    stamp = root / f"{sha}.json"
    if dest.exists():  # an interrupted earlier fetch (no stamp): never trusted
        shutil.rmtree(dest)
    failures = []
    for mirror in recipe.pin.mirrors:
        ui.step(f"source: {mirror.label()} @ {sha[:12]}")
        with paths.scratch("fetch-") as tmp:    # in the cache, so the finished tree is renamed into place
            work = Path(tmp) / "tree"
            try:
                provenance = _FETCHERS[mirror.kind](mirror, sha, work)
            except (MirrorFailed, subprocess.TimeoutExpired, OSError) as exc:
                ui.warn(f"mirror {mirror.label()} failed: {exc}; trying the next one")
                failures.append(f"{mirror.label()}: {exc}")
                continue
            os.replace(work, dest)
        locks.write_atomic(stamp, json.dumps(provenance, indent=2))   # the stamp is what makes the tree trusted
        ui.info(f"source verified: {provenance['verified_by']}")
        return SourceTree(dest, sha, provenance)
    raise BuildFailed(f"no mirror could provide llama.cpp {sha}: " + "; ".join(failures),
                      where=str(recipe.path), fix="check the network, or pass --source DIR with a local checkout")


def local_tree(path: str, recipe: Recipe) -> SourceTree:
    """A directory given by the user; a git checkout must be at the pinned sha."""
    tree = Path(path).expanduser().resolve()
    if not (tree / "CMakeLists.txt").is_file() or not (tree / "ggml").is_dir():
        raise AssembleError("not a llama.cpp source tree (no CMakeLists.txt and ggml/)", where=str(tree),
                            fix="point --source at the top of a llama.cpp checkout")
    # own_root: a plain tree inside another repository (a vendor/llama.cpp folder) is not that repository
    proc = git("rev-parse", "HEAD", cwd=tree, own_root=True)
    if proc.returncode != 0:
        ui.warn(f"{tree} is not a git checkout: its commit cannot be verified; recorded as local")
        return SourceTree(tree, None, {"kind": "local", "path": str(tree), "verified_by": "nothing (not git)"})
    head = proc.stdout.strip()
    if head != recipe.pin.sha:
        raise AssembleError(f"the local tree is at {head}, the recipe pins {recipe.pin.sha}", where=str(tree),
                            fix=f"git -C {tree} checkout {recipe.pin.sha}, or re-pin the recipe (assemble pin)")
    dirty = git("status", "--porcelain", "--untracked-files=no", cwd=tree, own_root=True).stdout.strip()
    return SourceTree(tree, head, {"kind": "local", "path": str(tree), "dirty": bool(dirty),
                                   "verified_by": "git rev-parse HEAD" + (" (uncommitted changes!)" if dirty else "")})
