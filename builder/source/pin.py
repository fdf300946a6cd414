"""Pin llama.cpp by the features it must have: resolve a ref, check it, find the earliest.

What `--earliest` returns, exactly: on REF's first-parent history, the oldest commit C
such that C and every first-parent commit after it, up to REF, has all the features:
the start of the unbroken run of good commits that ends at REF. A feature that was
added, removed and re-added therefore counts from its re-addition; pinning anything
in [C, REF] is safe, and an older commit that happened to have the features before
one was taken out again is never proposed.

How, exactly and fast. Plain bisection assumes that a feature, once there, stays;
real history breaks that (reverts), and then bisection can return any transition.
Instead: a feature's detectors read a few paths, so its value can only change at a
commit that changes one of them. One pass of git's path-limited log (`--raw`) lists
those commits and the blob each file has before and after (git compares trees only).
Walking them newest first, each state is checked once (results cached by blob id)
until the feature is found absent: that stretch's newest commit is the newest one
lacking it. C is the commit after the newest commit that lacks any feature; the
features absent there decided it. The result is then re-checked by resolving paths
through the commits' trees: C has all features, its first parent lacks the deciding ones.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import locks, paths, ui
from builder.proc import git, last_line
from builder.errors import AssembleError, BuildFailed
from builder.source.features import implied_fix
from builder.source.features import (BlobCache, CommitView, Detector, Feature, FeatureReport, StateView, check_view,
                                     evaluate, lookup)
from builder.source.gitobjects import Change, GitRepo
from builder.paths import cache_dir
from builder.config.recipe import Recipe, lock_path, parse_recipe
from builder.config.upstream import TAG_GLOB, TAG_RE, build_from_describe


@dataclass(frozen=True)
class Commit:
    sha: str
    date: str
    subject: str


@dataclass(frozen=True)
class Removal:
    """A feature that was present earlier, then taken out (the reason older commits are excluded)."""
    feature: str
    present_until: str      # the last commit of the older run that had it
    removed_by: str         # the commit after it, which lacks it


@dataclass(frozen=True)
class Earliest:
    commit: Commit
    parent: str | None                 # first parent of commit; None: the root, nothing older
    deciding: tuple[str, ...]          # features the parent lacks (why nothing older qualifies)
    reasons: dict[str, str]            # deciding feature -> what the parent lacks
    position: int                      # index in first-parent history, 0 = oldest
    history: int                       # length of REF's first-parent history
    checked: int                       # commits whose features were evaluated
    seconds: float
    removals: tuple[Removal, ...] = ()

    def explain(self, ref: str) -> str:
        c = self.commit
        head = f"{c.sha[:12]} ({c.date[:10]}, {c.subject!r})"
        if self.parent is None:
            return (f"{head} is the root of {ref}'s first-parent history, and every commit "
                    f"since has all the features")
        why = "; ".join(f"{f}: {self.reasons[f]}" for f in self.deciding)
        text = (f"{head} is the oldest commit from which every first-parent commit up to {ref} has all "
                f"the features; decided by {', '.join(self.deciding)}: its parent {self.parent[:12]} lacks "
                f"{'it' if len(self.deciding) == 1 else 'them'} ({why})")
        for r in self.removals:
            text += (f". Note: {r.feature} was present earlier, up to {r.present_until[:12]}, and removed by "
                     f"{r.removed_by[:12]}; commits before the removal are not offered")
        return text


@dataclass(frozen=True)
class PinResult:
    repo: str
    ref: str
    head: Commit
    report: FeatureReport                 # the features at head
    earliest: Earliest | None = None
    build: str | None = None              # upstream's build number for the pinned sha (config.upstream)

    @property
    def sha(self) -> str:
        return self.earliest.commit.sha if self.earliest else self.head.sha


def _commit(repo: GitRepo, sha: str) -> Commit:
    info = repo.commit_info(sha)
    return Commit(sha, info["date"], info["subject"])


def _under(path: str, paths: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p + "/") or p.startswith(path + "/") for p in paths)


class _Scan:
    """Walks one feature's constant segments on first-parent history, newest first, lazily.

    The feature's value can only change at a commit that changes one of its paths. When
    those paths are plain files, the log already says which blob each has after each
    change, so walking older only swaps entries in `state` and reads no tree at all; a
    feature that looks at a directory is checked by resolving paths in each commit.
    """

    def __init__(self, repo: GitRepo, history: list[str], feature: Feature,
                 changes: list[tuple[int, dict[str, Change]]], cache: dict[tuple[Detector, str], bool]):
        self.repo, self.history, self.feature, self.cache = repo, history, feature, cache
        self.changes = changes  # (first-parent index, what it changes), newest first
        self.checked = 0
        paths = feature.paths()
        self.state = {p: repo.entry(history[-1], p) for p in paths}
        self.files_only = (all(e is None or not e.is_tree for e in self.state.values())
                           and all(path in self.state for _, ch in changes for path in ch))

    def value(self, i: int) -> bool:
        self.checked += 1
        view: StateView | CommitView
        if self.files_only:
            view = StateView(self.repo, self.state, self.cache)
        else:
            view = CommitView(self.repo, self.history[i], self.cache)
        return all(evaluate(view, d)[0] for d in self.feature.detectors)

    def segments(self) -> Iterator[tuple[int, int, bool]]:
        """(lo, hi, present) for each stretch in which the feature's paths do not change."""
        hi = len(self.history) - 1
        for i, change in self.changes:
            yield i, hi, self.value(i)
            for path, c in change.items():  # step to the commit before i
                self.state[path] = c.old
            hi = i - 1
        if hi >= 0:
            yield 0, hi, self.value(hi)


def find_earliest(repo: GitRepo, head: str, features: Sequence[Feature]) -> Earliest:
    """The start of the unbroken run of commits with all `features` that ends at head."""
    start = time.monotonic()
    if not features:
        raise AssembleError("the recipe lists no features, so there is no earliest commit to find",
                            fix="add [pin] features = [...] to the recipe, or pin without --earliest")
    # This walks history: in a shallow clone the oldest commit kept looks like the root,
    # so a too-new commit would be proposed. (A plain pin reads only REF's own tree,
    # which a shallow clone has in full, so pin() without --earliest stays allowed.)
    if repo.is_shallow():
        raise AssembleError("shallow history: the earliest commit cannot be found in a cut-off history",
                            where=str(repo.path), fix="fetch more (git fetch --unshallow) or use a full clone")
    history = repo.first_parent_history(head)
    index = {sha: i for i, sha in enumerate(history)}
    paths = sorted({p for f in features for p in f.paths()})
    changes = repo.path_changes(head, paths)
    by_index = sorted(((index[c], ch) for c, ch in changes.items() if c in index), key=lambda t: -t[0])
    cache = BlobCache(features)
    newest_absent: dict[str, int] = {}
    scans, walks = [], {}
    for f in features:
        mine = [(i, {p: c for p, c in ch.items() if _under(p, f.paths())}) for i, ch in by_index]
        scan = _Scan(repo, history, f, [(i, ch) for i, ch in mine if ch], cache)
        scans.append(scan)
        walks[f.name] = walk = scan.segments()
        newest_absent[f.name] = -1
        for _lo, hi, present in walk:
            if not present:
                if hi == len(history) - 1:
                    raise AssembleError(f"{head[:12]} itself lacks {f.name}", fix="pin a ref that has it")
                newest_absent[f.name] = hi
                break
    worst = max(newest_absent.values())
    pos = worst + 1
    deciding = tuple(n for n, i in newest_absent.items() if i == worst) if worst >= 0 else ()
    # Only to explain: was a deciding feature there before it went missing? Continue its
    # walk to the next older segment that has it (git log -S would say the same, slower).
    removals = []
    for name in deciding:
        for _lo, hi, present in walks[name]:
            if present:
                removals.append(Removal(name, history[hi], history[hi + 1]))
                break
    found = history[pos]
    parent = history[pos - 1] if pos > 0 else None
    # Independent re-check through full path resolution: found has all, parent lacks the deciding ones.
    fresh: dict[tuple[Detector, str], bool] = {}
    at_found = check_view(CommitView(repo, found, fresh), features)
    reasons = {}
    if parent is not None:
        at_parent = check_view(CommitView(repo, parent, fresh), features)
        if not set(deciding) <= set(at_parent.missing):
            raise BuildFailed(f"internal: {parent[:12]} was expected to lack {', '.join(deciding)}",
                              fix="report this with the repository and ref")
        reasons = {n: at_parent.reasons[n] for n in deciding}
    if at_found.missing:
        raise BuildFailed(f"internal: {found[:12]} was expected to have {', '.join(at_found.missing)}",
                          fix="report this with the repository and ref")
    return Earliest(commit=_commit(repo, found), parent=parent, deciding=deciding, reasons=reasons,
                    position=pos, history=len(history), checked=sum(s.checked for s in scans) + 2,
                    seconds=time.monotonic() - start,
                    removals=tuple(removals))


def pin(repo: GitRepo, ref: str, names: Sequence[str], earliest: bool = False) -> PinResult:
    """Resolve ref, check every feature there, optionally find the earliest commit with all of them."""
    features = lookup(names)
    head = repo.resolve(ref)
    report = check_view(CommitView(repo, head, {}), features)
    if report.missing:
        label = ref if head.startswith(ref) else f"{ref} ({head[:12]})"
        raise AssembleError(f"{label} lacks {len(report.missing)} feature(s): {report.missing_text()}",
                            where=str(repo.path),
                            fix="pin a newer ref (--ref), or remove those features from the recipe"
                                + implied_fix(report.missing))
    found = find_earliest(repo, head, features) if earliest else None
    pinned = found.commit.sha if found else head
    return PinResult(repo=str(repo.path), ref=ref, head=_commit(repo, head), report=report, earliest=found,
                     build=upstream_build(repo, pinned))


def upstream_build(repo: GitRepo, sha: str) -> str | None:
    """The nearest bNNNN tag at or before sha and how far past it ("b7416", "b7416+3"); None when
    the repository has no such tag (a shallow clone, a fork without tags)."""
    tag = repo.git("describe", "--tags", "--match", TAG_GLOB, "--abbrev=0", sha, check=False).strip()
    if not TAG_RE.fullmatch(tag):
        return None
    count = repo.git("rev-list", "--count", f"{tag}..{sha}", check=False).strip()
    return build_from_describe(tag, int(count)) if count.isdigit() else None


# --- where the repository comes from ------------------------------------------

def _mirror_name(url: str) -> str:
    tail = re.sub(r"\.git$", "", url.rstrip("/").rsplit("/", 1)[-1]) or "repo"
    owner = url.rstrip("/").rsplit("/", 2)[-2].rsplit(":", 1)[-1] if url.count("/") >= 1 else "x"
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{owner}+{tail}")


def open_repo(spec: str) -> GitRepo:
    """A local repository directory as is; a URL is mirrored (bare) under the cache and refreshed."""
    local = Path(spec).expanduser()
    if local.exists():
        return GitRepo(local)
    if not re.match(r"^(https?|ssh|git|file)://|^[\w.-]+@[\w.-]+:", spec):
        raise AssembleError("no such repository directory, and not a URL", where=spec,
                            fix="give a git clone's directory or a clone URL with --repo")
    dest = cache_dir() / "git" / f"{_mirror_name(spec)}.git"
    if dest.is_dir():
        _mirror_git(["--git-dir", str(dest), "fetch", "--quiet", "--prune", "--tags", spec,
                     "+refs/heads/*:refs/heads/*"], spec, dest)
        return GitRepo(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # A full bare clone (a blobless one would fetch each blob the scan reads, one round trip
    # at a time); cloned beside the destination and renamed, so an interrupted clone is never used.
    with paths.scratch("clone-") as tmp:
        _mirror_git(["clone", "--bare", "--quiet", spec, f"{tmp}/repo.git"], spec, dest)
        os.replace(f"{tmp}/repo.git", dest)
    return GitRepo(dest)


def _mirror_git(args: list[str], spec: str, dest: Path) -> None:
    ui.step(f"{'updating' if dest.exists() else 'cloning'} {spec} into {dest}")
    proc = git(*args, timeout=None)
    if proc.returncode != 0:
        raise AssembleError(f"cannot mirror {spec}: {last_line(proc)}", where=str(dest),
                            fix="check the network, or pass --repo DIR with a local clone")


# --- writing the pin back ------------------------------------------------------

_TABLE_RE = re.compile(r"^\s*\[")


def write_recipe_pin(path: Path, sha: str, build: str | None) -> bool:
    """Set [pin] sha and build in the recipe text, keeping every comment and line (a build
    number that no longer applies is removed); True if the text changed."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    header, end = None, len(lines)
    for i, line in enumerate(lines):
        if _TABLE_RE.match(line):
            if header is not None:
                end = i
                break
            if line.strip().split("#", 1)[0].strip() == "[pin]":
                header = i
    if header is None:
        raise AssembleError("the recipe has no [pin] table", where=str(path), fix="add [pin] with sha and features")
    wanted = {"sha": sha, "build": build}
    for key, value in wanted.items():
        at = next((i for i in range(header + 1, end) if _key_line(key).fullmatch(lines[i].rstrip("\r\n"))), None)
        if at is None:
            if value is not None:
                lines.insert(header + 1 + (key == "build"), f'{key} = "{value}"\n')
                end += 1
            continue
        if value is None:
            del lines[at]
            end -= 1
            continue
        m = _key_line(key).fullmatch(lines[at].rstrip("\r\n"))
        assert m is not None      # `at` was found by this very match
        newline = lines[at][len(lines[at].rstrip("\r\n")):]
        lines[at] = f"{m.group(1)}{m.group(2)}{value}{m.group(2)}{m.group(4)}{newline}"
    new = "".join(lines)
    if new == text:
        return False
    parse_recipe(path, new)  # never write a recipe that no longer loads
    _atomic_write(path, new)
    return True


def _key_line(key: str) -> re.Pattern[str]:
    return re.compile(rf'(\s*{key}\s*=\s*)(["\'])([^"\']*)\2(.*)')


def write_lock(recipe: Recipe, result: PinResult) -> Path:
    """The pin as data next to the recipe (for recipes that should not be edited)."""
    data = result_json(recipe, result)
    data["sha"] = result.sha
    path = lock_path(recipe.path)
    _atomic_write(path, json.dumps(data, indent=2) + "\n")
    return path


def _atomic_write(path: Path, text: str) -> None:
    try:
        locks.write_atomic(path, text)
    except OSError as exc:
        raise AssembleError(f"cannot write ({exc.strerror or exc})", where=str(path),
                            fix="copy the recipe somewhere writable and pin the copy, or use --lock") from None


def result_json(recipe: Recipe, result: PinResult) -> dict[str, Any]:
    e = result.earliest
    return {
        "recipe": recipe.name,
        "repo": result.repo,
        "ref": result.ref,
        "head": vars(result.head),
        "features": dict(result.report.present),
        "pinned": result.sha,
        "build": result.build,
        "earliest": None if e is None else {
            **vars(e.commit), "parent": e.parent, "deciding": list(e.deciding), "reasons": e.reasons,
            "position": e.position, "history": e.history, "checked": e.checked,
            "seconds": round(e.seconds, 3), "explanation": e.explain(result.ref),
            "removals": [vars(r) for r in e.removals],
        },
    }
