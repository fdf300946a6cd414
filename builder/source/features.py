"""Named llama.cpp features and the detectors that prove a tree or a commit has them.

The registry is data (builder/data/features.toml). Each feature has one or more
detectors, all of which must hold; a detector looks at one file, or the first of
several alternative paths that exists (files move: examples/server -> tools/server):

    { file = "common/arg.cpp", contains = '"--fit"' }          a string
    { file = "common/arg.cpp", regex = 'foo\\s*\\(' }          a regular expression
    { file = "ggml/CMakeLists.txt", cmake_option = "GGML_BACKEND_DL" }
    { file = "tools/mtmd" }                                     the path exists

The same detectors run over a directory (a source cache, an sdist mirror, a local
tree) and over a git commit read object by object (see gitobjects.py), where
results are cached by blob id: an unchanged file costs nothing the second time.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Protocol, cast

from builder.config.recipe import ALL_VARIANTS_FEATURE, Recipe
from builder.errors import AssembleError
from builder.paths import builtin_data
from builder.source.gitobjects import GitRepo

REGISTRY = builtin_data("features.toml")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
KINDS = ("contains", "regex", "cmake_option")


@dataclass(frozen=True)
class Detector:
    files: tuple[str, ...]         # alternatives, tried in order
    kind: str                      # exists | contains | regex | cmake_option
    value: str | None = None

    def describe(self) -> str:
        where = " or ".join(self.files)
        if self.kind == "exists":
            return f"{where} exists"
        if self.kind == "contains":
            return f"{where} contains {self.value!r}"
        if self.kind == "regex":
            return f"{where} matches /{self.value}/"
        return f"{where} declares option({self.value})"

    def lacking(self, path: str) -> str:
        """Why `path` (which exists) does not satisfy this detector."""
        verb = {"contains": f"does not contain {self.value!r}", "regex": f"does not match /{self.value}/",
                "cmake_option": f"does not declare option({self.value})"}.get(self.kind, "is not a file")
        return f"{path} {verb}"

    def matches(self, data: bytes) -> bool:
        return bool(_matcher(self.kind, self.value)(data))


@cache
def _matcher(kind: str, value: str | None) -> Callable[[bytes], object]:
    if value is None:                  # the kinds that take no value
        return lambda data: True
    if kind == "contains":
        needle = value.encode()
        return lambda data: needle in data
    if kind == "regex":
        return re.compile(value.encode(), re.MULTILINE).search
    if kind == "cmake_option":
        # option(NAME "doc" default) or cmake_dependent_option(NAME ...), at the start of a line
        pattern = rb"^[ \t]*(?:cmake_dependent_)?option[ \t]*\([ \t\n]*" + re.escape(value.encode()) + rb"[\s)]"
        return re.compile(pattern, re.MULTILINE | re.IGNORECASE).search
    return lambda data: True


@dataclass(frozen=True)
class Feature:
    name: str
    description: str
    detectors: tuple[Detector, ...]

    def paths(self) -> tuple[str, ...]:
        """Every path a detector reads; nothing else can change the answer."""
        return tuple(dict.fromkeys(f for d in self.detectors for f in d.files))


@dataclass(frozen=True)
class FeatureReport:
    present: dict[str, str]            # feature -> evidence
    missing: tuple[str, ...]
    reasons: dict[str, str] = field(default_factory=dict)  # missing feature -> what was not found

    @property
    def ok(self) -> bool:
        return not self.missing

    def missing_text(self) -> str:
        return "; ".join(f"{n} ({self.reasons[n]})" if n in self.reasons else n for n in self.missing)


# --- registry ----------------------------------------------------------------

def _fail(path: Path, key: str, what: str, fix: str) -> AssembleError:
    return AssembleError(what, where=f"{path}: {key}", fix=fix)


def _detector(path: Path, key: str, raw: object) -> Detector:
    if not isinstance(raw, dict):
        raise _fail(path, key, "a detector must be a table", "write { file = \"...\", contains = \"...\" }")
    unknown = set(raw) - {"file", *KINDS}
    if unknown:
        raise _fail(path, key, f"unknown detector key(s) {sorted(unknown)}",
                    f"use file plus at most one of {', '.join(KINDS)}")
    files = raw.get("file")
    if isinstance(files, str):
        files = [files]
    if not isinstance(files, list) or not files or not all(isinstance(f, str) and f.strip("/") for f in files):
        raise _fail(path, f"{key}.file", "needs a path or a list of alternative paths",
                    'write file = "common/arg.cpp" (relative to the llama.cpp root)')
    kinds = [k for k in KINDS if k in raw]
    if len(kinds) > 1:
        raise _fail(path, key, f"more than one check ({', '.join(kinds)})", "split it into two detectors")
    kind = kinds[0] if kinds else "exists"
    value = raw.get(kind) if kinds else None
    if kinds and (not isinstance(value, str) or not value):
        raise _fail(path, f"{key}.{kind}", "needs a non-empty string", f'write {kind} = "..."')
    if kind == "regex":
        try:
            re.compile(cast(str, value))   # checked just above
        except re.error as exc:
            raise _fail(path, f"{key}.regex", f"invalid regular expression ({exc})", "fix the pattern") from None
    return Detector(tuple(f.strip("/") for f in files), kind, value)


def parse_registry(path: Path, text: str | None = None) -> dict[str, Feature]:
    try:
        data = tomllib.loads(text if text is not None else path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AssembleError(f"cannot read the feature registry ({exc})", where=str(path),
                            fix="restore the file from the package") from None
    features: dict[str, Feature] = {}
    for i, raw in enumerate(data.get("feature", [])):
        key = f"feature[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"name", "description", "detect"}:
            raise _fail(path, key, "a feature has exactly name, description and detect",
                        "remove other keys")
        name = raw.get("name")
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise _fail(path, f"{key}.name", f"invalid feature name {name!r}", "use lower-case words and '-'")
        if name in features:
            raise _fail(path, f"{key}.name", f"feature '{name}' is defined twice", "keep one definition")
        if not isinstance(raw.get("description"), str) or not raw["description"].strip():
            raise _fail(path, f"{key}.description", "needs a description", 'add description = "..."')
        detect = raw.get("detect")
        if not isinstance(detect, list) or not detect:
            raise _fail(path, f"{key}.detect", "needs at least one detector",
                        'add detect = [{ file = "...", contains = "..." }]')
        detectors = tuple(_detector(path, f"{key}.detect[{j}]", d) for j, d in enumerate(detect))
        features[name] = Feature(name, raw["description"].strip(), detectors)
    if not features:
        raise _fail(path, "feature", "the registry defines no feature", "add [[feature]] tables")
    return features


@lru_cache(maxsize=4)
def _load(path: Path) -> dict[str, Feature]:
    return parse_registry(path)


def registry(path: Path | None = None) -> dict[str, Feature]:
    return _load(path or REGISTRY)


def lookup(names: Iterable[str], features: dict[str, Feature] | None = None) -> list[Feature]:
    """The named features; an unknown name is refused with the list of valid ones."""
    features = features if features is not None else registry()
    unknown = [n for n in names if n not in features]
    if unknown:
        raise AssembleError(f"unknown feature(s): {', '.join(unknown)}",
                            fix=f"use names from the registry: {', '.join(sorted(features))}")
    return [features[n] for n in dict.fromkeys(names)]


# --- evaluation ----------------------------------------------------------------

class View(Protocol):
    """One state of a source tree: a directory or a git commit."""

    def kind(self, path: str) -> str | None: ...              # "file" | "dir" | None
    def check(self, path: str, detector: Detector) -> bool: ...  # the file's content matches


class DirView:
    def __init__(self, root: Path):
        self.root = Path(root)

    def kind(self, path: str) -> str | None:
        p = self.root / path
        return "dir" if p.is_dir() else "file" if p.is_file() else None

    def check(self, path: str, detector: Detector) -> bool:
        return detector.matches((self.root / path).read_bytes())


class BlobCache(dict[tuple["Detector", str], bool]):
    """(detector, blob id) -> result. Told which detectors read which path, it runs them
    all on a blob it had to read, so several features never read one blob twice."""

    def __init__(self, features: Sequence[Feature] = ()):
        super().__init__()
        self.readers: dict[str, list[Detector]] = {}
        for f in features:
            for d in f.detectors:
                for path in d.files:
                    self.readers.setdefault(path, []).append(d)


def _blob_matches(repo: GitRepo, cache: dict[tuple[Detector, str], bool], detector: Detector, oid: str, path: str) -> bool:
    key = (detector, oid)
    hit = cache.get(key)
    if hit is None:
        data = repo.read(oid)[1]
        for other in getattr(cache, "readers", {}).get(path, ()):
            cache[(other, oid)] = other.matches(data)
        hit = cache[key] = detector.matches(data)
    return hit


class CommitView:
    """A commit read through GitRepo; content checks are cached by blob id in `cache`."""

    def __init__(self, repo: GitRepo, sha: str, cache: dict[tuple[Detector, str], bool]):
        self.repo, self.sha, self.cache = repo, sha, cache

    def kind(self, path: str) -> str | None:
        entry = self.repo.entry(self.sha, path)
        if entry is None or entry.mode == "160000":
            return None
        return "dir" if entry.is_tree else "file"

    def check(self, path: str, detector: Detector) -> bool:
        entry = self.repo.entry(self.sha, path)
        assert entry is not None, "check() runs on a path kind() found"
        return _blob_matches(self.repo, self.cache, detector, entry.oid, path)


class StateView:
    """Some paths' entries, already known (pin reconstructs them from git's log without
    reading any tree); content checks are cached by blob id like CommitView's."""

    def __init__(self, repo: GitRepo, state: dict[str, Any], cache: dict[tuple[Detector, str], bool]):
        self.repo, self.state, self.cache = repo, state, cache   # state: path -> Entry | None

    def kind(self, path: str) -> str | None:
        entry = self.state[path]
        if entry is None or entry.mode == "160000":
            return None
        return "dir" if entry.is_tree else "file"

    def check(self, path: str, detector: Detector) -> bool:
        return _blob_matches(self.repo, self.cache, detector, self.state[path].oid, path)


def evaluate(view: View, detector: Detector) -> tuple[bool, str]:
    """(holds, evidence or reason), trying the detector's alternative paths in order."""
    seen = []
    for path in detector.files:
        kind = view.kind(path)
        if kind is None:
            continue
        seen.append(path)
        if detector.kind == "exists":
            return True, f"{path} exists"
        if kind == "file" and view.check(path, detector):
            single = Detector((path,), detector.kind, detector.value)
            return True, single.describe()
    if not seen:
        return False, f"no {' or '.join(detector.files)}"
    return False, "; ".join(detector.lacking(p) for p in seen)


def check_view(view: View, features: Sequence[Feature]) -> FeatureReport:
    present, missing, reasons = {}, [], {}
    for feature in features:
        evidence = []
        for detector in feature.detectors:
            ok, text = evaluate(view, detector)
            if not ok:
                missing.append(feature.name)
                reasons[feature.name] = text
                break
            evidence.append(text)
        else:
            present[feature.name] = "; ".join(evidence)
    return FeatureReport(present, tuple(missing), reasons)


def check_tree(tree: Path, names: Sequence[str]) -> FeatureReport:
    """Which of the named features the directory `tree` has, with evidence."""
    tree = Path(tree)
    if not tree.is_dir():
        raise AssembleError("source tree does not exist", where=str(tree), fix="fetch the source first")
    return check_view(DirView(tree), lookup(names))


def check_commit(repo: GitRepo, sha: str, names: Sequence[str], cache: dict[tuple[Detector, str], bool] | None = None) -> FeatureReport:
    """The same check on a commit, reading git objects (no checkout)."""
    return check_view(CommitView(repo, sha, {} if cache is None else cache), lookup(names))


def require(tree: Path, recipe: Recipe) -> FeatureReport:
    """Check the recipe's features on the tree about to be built; refuse if any is absent."""
    report = check_tree(tree, recipe.pin.features)
    if report.missing:
        raise AssembleError(
            f"the source tree lacks {len(report.missing)} feature(s) the recipe needs: {report.missing_text()}",
            where=f"{tree} (recipe {recipe.name})",
            fix=f"re-pin to a commit that has them: assemble pin {recipe.path} --earliest "
                f"(or remove them from [pin] features){implied_fix(report.missing)}")
    return report


def implied_fix(missing: tuple[str, ...]) -> str:
    return (' (cpu-all-variants comes with [cpu] variants = "all", the default: name one level instead, '
            'e.g. [cpu] variants = "haswell")') if ALL_VARIANTS_FEATURE in missing else ""
