"""Read git objects straight from a repository, without a checkout.

One long-lived `git cat-file --batch` process serves every read, paths are resolved
through tree objects, and tree lookups are cached by tree id: between two nearby
commits almost every subtree is shared, so most lookups never reach git.
"""

from __future__ import annotations

import subprocess
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.errors import AssembleError
from builder.proc import git, git_env, last_line

TREE_MODE = b"40000"
_CACHE_LIMIT = 200_000   # (tree id, name) lookups kept; ~40 MB at most


@dataclass(frozen=True)
class Entry:
    mode: str   # git file mode: 100644, 100755, 120000 (link), 40000 (tree), 160000 (submodule)
    oid: str

    @property
    def is_tree(self) -> bool:
        return self.mode == "40000"


class GitRepo:
    """A git repository (bare or not) read through `git cat-file --batch`.

    Use as a context manager, or call close(); the reader process starts on first use.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path).expanduser().resolve()
        proc = git("-C", str(self.path), "rev-parse", "--absolute-git-dir")
        if proc.returncode != 0:
            raise AssembleError("not a git repository", where=str(self.path),
                                fix="pass --repo with a git clone of llama.cpp (bare or not)")
        self.git_dir = Path(proc.stdout.strip())
        self._proc: subprocess.Popen[bytes] | None = None
        self._lookups: OrderedDict[tuple[str, str], Entry | None] = OrderedDict()
        self._commit_trees: dict[str, str] = {}

    # --- process -----------------------------------------------------------

    def __enter__(self) -> GitRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None and self._proc.stdout is not None   # both piped
            self._proc.stdin.close()
            self._proc.wait()
            self._proc.stdout.close()
            self._proc = None

    def git(self, *args: str, check: bool = True) -> str:
        """Run one git command in the repository and return its stdout."""
        proc = git("--git-dir", str(self.git_dir), *args, timeout=None)
        if check and proc.returncode != 0:
            raise AssembleError(f"git {args[0]} failed: {last_line(proc)}", where=str(self.path),
                                fix="check the repository and the ref")
        return str(proc.stdout)

    def _batch(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._proc = subprocess.Popen(["git", "--git-dir", str(self.git_dir), "cat-file", "--batch"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=git_env())
        return self._proc

    def read(self, oid: str) -> tuple[str, bytes]:
        """(type, content) of one object; raises AssembleError if it is missing."""
        proc = self._batch()
        assert proc.stdin is not None and proc.stdout is not None   # both piped
        proc.stdin.write(oid.encode() + b"\n")
        proc.stdin.flush()
        header = proc.stdout.readline().split()
        if len(header) != 3:
            raise AssembleError(f"git object {oid} is missing", where=str(self.path),
                                fix="fetch the full history (a shallow or partial clone lacks it)")
        size = int(header[2])
        data = proc.stdout.read(size)
        proc.stdout.read(1)  # the newline after each object
        return header[1].decode(), data

    # --- refs and history --------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The full sha of the commit `ref` names."""
        proc = git("--git-dir", str(self.git_dir), "rev-parse", "--verify", "--quiet", "--end-of-options",
                   f"{ref}^{{commit}}")
        if proc.returncode != 0:
            fix = "give a branch, tag or sha that exists there (git fetch first?)"
            if self.is_shallow():
                fix = "this clone is shallow: git fetch --unshallow, or give a ref inside its history"
            raise AssembleError(f"'{ref}' names no commit in this repository", where=str(self.path), fix=fix)
        return str(proc.stdout).strip()

    def is_shallow(self) -> bool:
        """Whether history is cut off (a --depth clone): older commits look like roots."""
        return self.git("rev-parse", "--is-shallow-repository").strip() == "true"

    def first_parent_history(self, head: str) -> list[str]:
        """Commits on head's first-parent chain, oldest first."""
        return self.git("rev-list", "--first-parent", "--reverse", head).split()

    def commit_info(self, sha: str) -> dict[str, Any]:
        """Author date (ISO 8601, committer's zone) and subject of a commit."""
        out = self.git("show", "-s", "--format=%cI%x00%s", sha)
        date, _, subject = out.rstrip("\n").partition("\x00")
        return {"sha": sha, "date": date, "subject": subject}

    # --- trees -------------------------------------------------------------

    def commit_tree(self, sha: str) -> str:
        tree = self._commit_trees.get(sha)
        if tree is None:
            kind, body = self.read(sha)
            if kind != "commit" or not body.startswith(b"tree "):
                raise AssembleError(f"{sha} is a {kind}, not a commit", where=str(self.path),
                                    fix="give a commit")
            tree = body[5:45].decode()
            self._commit_trees[sha] = tree
        return tree

    def _lookup(self, tree: str, name: str) -> Entry | None:
        key = (tree, name)
        if key in self._lookups:
            return self._lookups[key]
        kind, body = self.read(tree)
        if kind != "tree":
            raise AssembleError(f"object {tree} is a {kind}, not a tree", where=str(self.path))
        found = None
        want = name.encode()
        # Entries are "<mode> <name>\0<20-byte id>"; parse them all and cache each,
        # since the same tree is usually asked for a sibling soon.
        pos, end = 0, len(body)
        while pos < end:
            space = body.index(b" ", pos)
            nul = body.index(b"\0", space)
            entry_name = body[space + 1:nul]
            entry = Entry(body[pos:space].decode(), body[nul + 1:nul + 21].hex())
            self._lookups[(tree, entry_name.decode(errors="surrogateescape"))] = entry
            if entry_name == want:
                found = entry
            pos = nul + 21
        self._lookups[key] = found  # also remember absence
        while len(self._lookups) > _CACHE_LIMIT:
            self._lookups.popitem(last=False)
        return found

    def entry(self, commit: str, path: str) -> Entry | None:
        """The tree entry at `path` in `commit`, or None when the path does not exist."""
        current = Entry("40000", self.commit_tree(commit))
        for part in [p for p in path.split("/") if p]:
            if not current.is_tree:
                return None
            found = self._lookup(current.oid, part)
            if found is None:
                return None
            current = found
        return current

    def path_changes(self, head: str, paths: list[str]) -> dict[str, dict[str, Change]]:
        """For each first-parent commit of head that changes any of `paths` (compared with its
        first parent; the root commit adds what it has), what it does to each file under them.

        One pass of git's own path-limited log: trees only, no blob is read.
        """
        if not paths:
            return {}
        # --diff-merges=first-parent: a merge counts as changing what it changes relative
        # to its first parent (implied by --first-parent since git 2.31; stated for clarity).
        out = self.git("--literal-pathspecs", "-c", "core.quotePath=false", "log", "--first-parent",
                       "--diff-merges=first-parent", "--no-renames", "--raw", "--no-abbrev",
                       "--format=%x01%H", head, "--", *paths)
        changes: dict[str, dict[str, Change]] = {}
        current: dict[str, Change] = {}
        for line in out.splitlines():
            if line.startswith("\x01"):
                current = changes[line[1:]] = {}
            elif line.startswith(":"):
                meta, _, path = line.partition("\t")
                old_mode, new_mode, old_oid, new_oid = meta[1:].split(" ")[:4]
                current[path] = Change(_entry(old_mode, old_oid), _entry(new_mode, new_oid))
        return changes


@dataclass(frozen=True)
class Change:
    old: Entry | None   # None: the path did not exist before (or does not after)
    new: Entry | None


def _entry(mode: str, oid: str) -> Entry | None:
    return None if set(oid) == {"0"} else Entry(mode.lstrip("0") or "0", oid)
