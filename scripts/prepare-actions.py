#!/usr/bin/env python3
"""Export each action the release workflow pins (builder.release.workflow.ACTIONS) at its pinned
commit from local git snapshots into a store that tests run the workflow with (act's
`--local-repository OWNER/REPO@SHA=STORE/OWNER+REPO@SHA`).

    python3 scripts/prepare-actions.py --snapshots DIR --store DIR

DIR of --snapshots holds `OWNER+REPO/repo`, a bare git directory of each action's repository.
Nothing fetched is ever committed: the store lives in the test cache (tests/support/act.py).

Each export is checked against the pinned commit, not trusted: the commit object hashes to the
pinned sha, every tree under it hashes to its id, every file written hashes to its blob id, and where
the snapshot has the pinned tag it must peel to the same commit. Blobs the snapshot lacks are allowed
only under dist/ (a snapshot can leave out large generated files): dist/ is then rebuilt from the
pinned source with npm (`npm ci` from the pinned package-lock.json, then the action's own `ncc build`
lines from its package.json), and the marker says so. When the registry lacks a locked version, the
newest later patch release declaring the same dependencies is locked instead, and the marker says
that too (`substituted`).

A finished export is `STORE/OWNER+REPO@SHA/` holding `.complete` (JSON: repo, sha, tag, what was
rebuilt and with which node and npm). It is written in `STORE/OWNER+REPO@SHA.part/` and renamed
when whole, so a run killed half-way leaves only a `.part`, which the next run replaces. A folder
without the marker is never touched (exit 2, naming it). A second run finds every marker: exit 0,
nothing done. Runs at once on one store take turns (a lock file).

Measured on the shared 2-core machine (2026-12-06, load average 8), the node24 pins: cold 4 min 30 s
(upload-artifact's rebuild 149 s, download-artifact's 120 s, the three others 1 s together; npm's own
cache held part of the packages); a second run 0.2 s, nothing done.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.release.workflow import ACTIONS, Action

MARKER = ".complete"
NPM_TIMEOUT = 900                  # seconds for one npm command (npm ci fetches a few hundred packages)


class Refused(Exception):
    """One line for the user: what is wrong and how to fix it."""


def folder_name(a: Action) -> str:
    return f"{a.repo.replace('/', '+')}@{a.sha}"


# --- reading git objects, checked ---------------------------------------------------------------

class Objects:
    """`git cat-file --batch` on one bare repository: each object read is hashed again here."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self.proc = subprocess.Popen(["git", "--git-dir", str(git_dir), "cat-file", "--batch"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)

    def read(self, oid: str, kind: str) -> bytes | None:
        """The object's content, None when the snapshot lacks it; its hash and type are checked."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(oid.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().decode().split()
        if header[1:] == ["missing"]:
            return None
        got, typ, size = header[0], header[1], int(header[2])
        data = self.proc.stdout.read(size)
        self.proc.stdout.read(1)                     # the newline after the content
        digest = hashlib.sha1(f"{typ} {size}\0".encode() + data, usedforsecurity=False).hexdigest()
        if got != oid or typ != kind or digest != oid:
            raise Refused(f"{self.git_dir}: object {oid} reads as a {typ} hashing to {digest}, not the {kind} "
                          f"asked for -- fix: fetch the snapshot again")
        return data


def tree_entries(data: bytes) -> Iterator[tuple[str, str, str]]:
    """(mode, name, id) of each entry of a raw tree object."""
    i = 0
    while i < len(data):
        space = data.index(b" ", i)
        nul = data.index(b"\0", space)
        yield data[i:space].decode(), data[space + 1:nul].decode(), data[nul + 1:nul + 21].hex()
        i = nul + 21


def export(objects: Objects, sha: str, dest: Path) -> list[str]:
    """Write the commit's tree into dest; the paths of the blobs the snapshot lacks."""
    commit = objects.read(sha, "commit")
    if commit is None:
        raise Refused(f"{objects.git_dir} has no commit {sha} -- fix: fetch a newer snapshot of the repository")
    tree = commit.split(b"\n", 1)[0].decode()
    if not tree.startswith("tree "):
        raise Refused(f"{objects.git_dir}: commit {sha} does not start with its tree -- fix: fetch the snapshot again")
    missing: list[str] = []
    walk(objects, tree[5:], dest, "", missing)
    return missing


def walk(objects: Objects, tree: str, dest: Path, prefix: str, missing: list[str]) -> None:
    data = objects.read(tree, "tree")
    if data is None:
        raise Refused(f"{objects.git_dir} lacks tree {tree} ({prefix or '/'}) -- fix: fetch the snapshot again")
    dest.mkdir(parents=True, exist_ok=True)
    for mode, name, oid in tree_entries(data):
        if "/" in name or name in (".", "..", ".git"):
            raise Refused(f"{objects.git_dir}: tree {tree} names {name!r} -- fix: this is not a plain action tree")
        path, rel = dest / name, prefix + name
        if mode == "40000":
            walk(objects, oid, path, rel + "/", missing)
        elif mode == "160000":
            continue                                 # a submodule: its files are not part of this commit
        else:
            blob = objects.read(oid, "blob")
            if blob is None:
                missing.append(rel)
            elif mode == "120000":
                path.symlink_to(blob.decode())
            else:
                path.write_bytes(blob)
                path.chmod(0o755 if mode == "100755" else 0o644)


def check_tag(git_dir: Path, a: Action) -> bool:
    """True when the snapshot has the tag and it peels to the pinned commit; False when it lacks it."""
    proc = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "-q",
                           f"refs/tags/{a.tag}^{{commit}}"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return False
    if proc.stdout.strip() != a.sha:
        raise Refused(f"{a.repo}: tag {a.tag} is {proc.stdout.strip()} in {git_dir}, the pin says {a.sha} "
                      f"-- fix: check the pin in builder/release/workflow.py (a tag can be moved, a commit cannot)")
    return True


# --- rebuilding dist/ ---------------------------------------------------------------------------

def ncc_lines(package: dict[str, Any]) -> list[str]:
    """The action's own `ncc build ...` commands: from its release script, else from any script."""
    scripts: dict[str, str] = package.get("scripts", {})
    for name in ["release", "package", "build", *scripts]:
        parts = [p.strip() for p in scripts.get(name, "").split("&&")]
        lines = [p for p in parts if p.startswith("ncc build")]
        if lines:
            return lines
    return []


def version(tool: str) -> str:
    return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()


def npm(cmd: list[str], cwd: Path, log: Path) -> subprocess.CompletedProcess[str]:
    """Run one npm command; its output goes to log (and is returned, for the 404 it may name)."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=NPM_TIMEOUT,
                          env=dict(os.environ, npm_config_update_notifier="false"))
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}(exit {proc.returncode})\n")
    return proc


def substitute(dest: Path, output: str, log: Path) -> dict[str, str] | None:
    """When `npm ci` failed only because the registry lacks one locked version: lock the newest later
    patch release of it instead, if it declares the same dependencies. What was changed, or None.

    (The npm registry reachable here lacks some versions: upload-artifact v7.0.0 locks
    @actions/artifact 6.2.0, of which only 6.2.1 is there, with the same dependencies.)"""
    m = re.search(r"404 Not Found - GET (https://\S+\.tgz)", output)
    if not m:
        return None
    lock_path = dest / "package-lock.json"
    lock = json.loads(lock_path.read_text())
    entries = [(k, v) for k, v in lock.get("packages", {}).items() if v.get("resolved") == m.group(1)]
    if not entries:
        return None
    name = entries[0][0].rsplit("node_modules/", 1)[1]
    locked = entries[0][1]["version"]
    major, minor, patch = (int(x) for x in locked.split("."))
    view = npm(["npm", "view", "--json", name, "versions"], dest, log)
    later = []
    for v in json.loads(view.stdout or "[]"):
        if re.fullmatch(rf"{major}\.{minor}\.\d+", v) and int(v.split(".")[2]) > patch:
            later.append(v)
    if not later:
        return None
    chosen = max(later, key=lambda v: int(v.split(".")[2]))
    info = json.loads(npm(["npm", "view", "--json", f"{name}@{chosen}", "dependencies", "dist"], dest, log).stdout)
    if (info.get("dependencies") or {}) != (entries[0][1].get("dependencies") or {}):
        return None
    for _, entry in entries:
        entry.update(version=chosen, resolved=info["dist"]["tarball"], integrity=info["dist"]["integrity"])
    lock_path.write_text(json.dumps(lock, indent=2) + "\n")
    return {"package": name, "locked": locked, "used": chosen,
            "why": f"the npm registry reached lacks {name}@{locked}; {chosen} declares the same dependencies"}


def rebuild(dest: Path, missing: list[str], log: Path) -> dict[str, Any]:
    """Rebuild dist/ with npm; what was done. The dependencies are removed again afterwards."""
    outside = [m for m in missing if not m.startswith("dist/")]
    if outside:
        raise Refused(f"the snapshot lacks {', '.join(outside[:3])} (not generated files) -- fix: fetch the "
                      f"snapshot again")
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise Refused(f"dist/ must be rebuilt ({', '.join(missing)}) and there is no {tool} -- fix: install "
                          f"Node.js and npm (Debian: apt-get install nodejs npm)")
    package = json.loads((dest / "package.json").read_text())
    lines = ncc_lines(package)
    if not lines or not (dest / "package-lock.json").is_file():
        raise Refused(f"{dest.name}: no package-lock.json or no `ncc build` script to rebuild dist/ with -- fix: "
                      f"use a snapshot that holds dist/")
    log.write_text("")
    ci = ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"]
    substituted: list[dict[str, str]] = []
    proc = npm(ci, dest, log)
    while proc.returncode != 0 and len(substituted) < 5:
        sub = substitute(dest, proc.stdout + proc.stderr, log)
        if sub is None:
            break
        substituted.append(sub)
        proc = npm(ci, dest, log)
    commands = [" ".join(ci)]
    for line in lines:
        if proc.returncode != 0:
            break
        cmd = ["npm", "exec", "--offline", "--", *line.split()]
        commands.append(" ".join(cmd))
        proc = npm(cmd, dest, log)
    if proc.returncode != 0:
        raise Refused(f"{dest.name}: `{' '.join(proc.args)}` failed ({proc.returncode}), see {log} -- fix: "
                      f"read that log (npm's registry must be reachable)")
    shutil.rmtree(dest / "node_modules")
    still = [m for m in missing if not (dest / m).is_file()]
    if still:
        raise Refused(f"{dest.name}: the rebuild did not make {', '.join(still)} -- fix: read {log}")
    return {"rebuilt": missing, "commands": commands, "substituted": substituted,
            "node": version("node"), "npm": version("npm")}


# --- one action ---------------------------------------------------------------------------------

def prepare(a: Action, snapshots: Path, store: Path) -> str:
    """Make STORE/OWNER+REPO@SHA complete; a word for what was done."""
    final = store / folder_name(a)
    if (final / MARKER).is_file():
        marker = json.loads((final / MARKER).read_text())
        if marker.get("sha") != a.sha:
            raise Refused(f"{final}/{MARKER} is for {marker.get('sha')} -- fix: remove {final}")
        return "kept"
    if final.exists() or final.is_symlink():
        raise Refused(f"{final} exists without {MARKER} (not made by this script, or changed) -- fix: remove it")
    git_dir = snapshots / a.repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        raise Refused(f"no snapshot of {a.repo} at {git_dir} -- fix: bring a git snapshot of {a.repo} there")
    part = store / (folder_name(a) + ".part")
    if part.is_dir() and not part.is_symlink():          # this script's own, from a run that was killed
        shutil.rmtree(part)
    elif part.exists() or part.is_symlink():
        part.unlink()
    tagged = check_tag(git_dir, a)
    started = time.monotonic()
    objects = Objects(git_dir)
    try:
        missing = export(objects, a.sha, part)
    finally:
        objects.close()
    marker = {"repo": a.repo, "sha": a.sha, "tag": a.tag, "tag_checked": tagged, "snapshot": str(git_dir),
              "verified": "commit, trees and every exported blob hashed to their ids",
              "rebuilt": [], "node": version("node") if shutil.which("node") else None,
              "npm": version("npm") if shutil.which("npm") else None}
    if missing:
        info = rebuild(part, missing, store / f"{folder_name(a)}.npm.log")
        pinned = {}
        for path in info["rebuilt"]:
            # does the rebuilt file happen to be byte-identical to the blob the commit names?
            blob = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", f"{a.sha}:{path}"],
                                  capture_output=True, text=True, timeout=60).stdout.strip()
            data = (part / path).read_bytes()
            same = hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest() == blob
            pinned[path] = {"blob": blob, "identical": same}
        # a rebuild with other tool versions is not expected to match what the pinned commit had
        marker.update(info, pinned_blobs=pinned)
    marker["seconds"] = round(time.monotonic() - started, 1)
    (part / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    part.rename(final)
    return "rebuilt dist/ and exported" if missing else "exported"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--snapshots", type=Path, required=True, help="folder of OWNER+REPO/repo bare git dirs")
    ap.add_argument("--store", type=Path, required=True, help="where OWNER+REPO@SHA/ folders are made")
    ap.add_argument("--only", action="append", default=[], help="an ACTIONS key (repeatable); default all")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.only) - set(ACTIONS))
    if unknown:
        print(f"error: no pinned action {unknown[0]!r} -- fix: one of {', '.join(ACTIONS)}", file=sys.stderr)
        return 2
    args.store.mkdir(parents=True, exist_ok=True)
    with (args.store / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)              # another run on this store finishes first
        for key, a in ACTIONS.items():
            if args.only and key not in args.only:
                continue
            started = time.monotonic()
            try:
                what = prepare(a, args.snapshots.resolve(), args.store.resolve())
            except Refused as e:
                print(f"error: {a.repo}@{a.sha[:12]} ({a.tag}): {e}", file=sys.stderr)
                return 2
            print(f"{a.repo}@{a.sha} ({a.tag}): {what} in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
