"""Check and apply the shipped patches on a copy of the pristine source tree.

Each patch is NAME.toml in patches/ (what it fixes, which trees it applies to, under
which build conditions) and one or more unified diffs beside it (variants for the forms
the patched code has had upstream; the first that applies cleanly is used); the format
is documented in patches/README.md.

Order of work: select the patches whose conditions hold; check every one with
`git apply --check` against the pristine tree (nothing is copied before all pass);
then copy the tree once, apply them in order, and rename the copy into place. The
source cache is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import paths, ui
from builder.proc import git
from builder.errors import AssembleError, BuildFailed
from builder.digest import sha256_file
from builder.source.features import check_tree, lookup
from builder.paths import cache_dir, data_dir
from builder.config.options import BuildConfig
from builder.config.recipe import SHA_RE, Recipe
from builder.config.targets import CudaArch
from builder.config.versions import CONSTRAINT_FORMS, parse_constraint, satisfies
from builder.source.fetch import SourceTree

STAMP = ".assemble-patched.json"   # inside a finished patched tree; its presence means complete


@dataclass(frozen=True)
class PatchContext:
    """What is being built, as far as a patch's conditions care."""
    backends: tuple[str, ...]
    cuda_version: str | None           # the CUDA toolkit in use, e.g. "12.8"; None without CUDA
    cuda_archs: tuple[CudaArch, ...]   # the unit's: 90, 120a, 86-real
    backend_dl: bool


def context_for(config: BuildConfig, cuda_version: str | None) -> PatchContext:
    """A resolved build as the patches' conditions see it (build and doctor alike)."""
    cuda_unit = config.cuda_unit()
    return PatchContext(backends=config.recipe.backends, cuda_version=cuda_version,
                        cuda_archs=cuda_unit.cuda_archs if cuda_unit else (),
                        backend_dl=config.units[0].value("GGML_BACKEND_DL") == "ON")


@dataclass(frozen=True)
class Conditions:
    backend_dl: bool | None = None
    backends: tuple[str, ...] = ()     # any of them is built
    cuda_toolkit: str | None = None    # version constraint: ">=13", ">=12.4,<13", "==12.8"
    cuda_archs: tuple[CudaArch, ...] = ()   # any of them is targeted (compared by number: 120a ~ 120)


@dataclass(frozen=True)
class Patch:
    name: str
    files: tuple[Path, ...]            # variants for the forms the code has had; first that applies
    fixes: str
    features: tuple[str, ...] = ()     # the tree must have all of them
    absent: tuple[str, ...] = ()       # ... and none of these (e.g. the upstream fix)
    shas: tuple[str, ...] = ()         # if given, only these commits
    when: Conditions = Conditions()
    opt_in: bool = False               # applied only when a recipe or --patch asks for it


@dataclass(frozen=True)
class AppliedPatch:
    name: str
    file: str        # file name inside patches/
    sha256: str
    fixes: str


@dataclass(frozen=True)
class PreparedTree:
    path: Path
    applied: tuple[AppliedPatch, ...]
    skipped: tuple[tuple[str, str], ...] = ()   # (patch, why it was not applied)


# --- loading -------------------------------------------------------------------

_TOP = {"name", "patch", "fixes", "applies", "when", "opt_in"}
_APPLIES = {"features", "absent", "shas"}
_WHEN = {"backend_dl", "backends", "cuda_toolkit", "cuda_archs"}


def _fail(path: Path, key: str, what: str, fix: str) -> AssembleError:
    return AssembleError(what, where=f"{path}: {key}" if key else str(path), fix=fix)


def _strings(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(path, key, "expected a list of strings", f'write {key} = ["..."]')
    return tuple(value)


def load_patch(meta: Path) -> Patch:
    try:
        data = tomllib.loads(meta.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise _fail(meta, "", f"cannot read patch metadata ({exc})", "fix the TOML") from None
    unknown = set(data) - _TOP
    if unknown:
        raise _fail(meta, ", ".join(sorted(unknown)), "unknown key(s)", f"use only: {', '.join(sorted(_TOP))}")
    for need in ("name", "fixes"):
        if not isinstance(data.get(need), str) or not data[need].strip():
            raise _fail(meta, need, f"missing '{need}'", f'add {need} = "..."')
    if data["name"] != meta.stem:
        raise _fail(meta, "name", f"name {data['name']!r} differs from the file name {meta.stem!r}",
                    "name the metadata file NAME.toml")
    names = data.get("patch")
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise _fail(meta, "patch", "needs a patch file name, or a list of variants",
                    'write patch = "NAME.patch"')
    files = tuple(meta.parent / n for n in names)
    for n, file in zip(names, files, strict=True):
        if not file.is_file() or file.parent != meta.parent:
            raise _fail(meta, "patch", f"no patch file {n!r} beside the metadata",
                        "put the .patch file in patches/ and name it here")
    applies = data.get("applies", {})
    when = data.get("when", {})
    for key, table, allowed in (("applies", applies, _APPLIES), ("when", when, _WHEN)):
        if not isinstance(table, dict) or set(table) - allowed:
            raise _fail(meta, key, f"unknown key(s) in [{key}]", f"use only: {', '.join(sorted(allowed))}")
    features = _strings(meta, "applies.features", applies.get("features", []))
    absent = _strings(meta, "applies.absent", applies.get("absent", []))
    try:
        lookup(features + absent)  # unknown feature names are refused here, not at build time
    except AssembleError as exc:
        raise _fail(meta, "applies", exc.what, exc.fix or "use names from builder/data/features.toml") from None
    shas = _strings(meta, "applies.shas", applies.get("shas", []))
    for sha in shas:
        if not SHA_RE.fullmatch(sha):
            raise _fail(meta, "applies.shas", f"{sha!r} is not a full 40-hex sha", "list full commit shas")
    if "backend_dl" in when and not isinstance(when["backend_dl"], bool):
        raise _fail(meta, "when.backend_dl", "expected true or false", "write backend_dl = true")
    toolkit = when.get("cuda_toolkit")
    if toolkit is not None:
        try:
            parse_constraint(toolkit)
        except ValueError as exc:
            raise _fail(meta, "when.cuda_toolkit", str(exc), f"write it as {CONSTRAINT_FORMS}") from None
    conditions = Conditions(backend_dl=when.get("backend_dl"),
                            backends=_strings(meta, "when.backends", when.get("backends", [])),
                            cuda_toolkit=toolkit,
                            cuda_archs=tuple(CudaArch.parse(a, f"{meta}: when.cuda_archs")
                                             for a in _strings(meta, "when.cuda_archs", when.get("cuda_archs", []))))
    if not isinstance(data.get("opt_in", False), bool):
        raise _fail(meta, "opt_in", "expected true or false", "write opt_in = true")
    return Patch(name=data["name"], files=files, fixes=" ".join(data["fixes"].split()), features=features,
                 absent=absent, shas=shas, when=conditions, opt_in=data.get("opt_in", False))


def load_patches(patches_dir: Path | None = None) -> list[Patch]:
    """Every patch in patches/, in name order (the order they are applied in)."""
    root = Path(patches_dir) if patches_dir else data_dir("patches")
    return [load_patch(m) for m in sorted(root.glob("*.toml"))]


# --- selection -------------------------------------------------------------------

def unmet_condition(c: Conditions, ctx: PatchContext) -> str | None:
    """Why the build context does not meet the conditions, or None when it does."""
    if c.backend_dl is not None and c.backend_dl != ctx.backend_dl:
        return f"GGML_BACKEND_DL is {'on' if ctx.backend_dl else 'off'}"
    if c.backends and not set(c.backends) & set(ctx.backends):
        return f"no backend among {', '.join(c.backends)} is built"
    if c.cuda_toolkit:
        if not ctx.cuda_version:
            return "no CUDA toolkit"
        if not satisfies(ctx.cuda_version, c.cuda_toolkit):
            return f"CUDA {ctx.cuda_version} does not satisfy {c.cuda_toolkit}"
    if c.cuda_archs:
        if not {a.base for a in c.cuda_archs} & {a.base for a in ctx.cuda_archs}:
            return f"no CUDA architecture among {', '.join(map(str, c.cuda_archs))} is targeted"
    return None


def select(patches: list[Patch], tree: Path | None, sha: str | None, recipe: Recipe,
           ctx: PatchContext) -> tuple[list[Patch], list[tuple[str, str]]]:
    """(patches to apply, (name, why not) for the others). tree None (not fetched yet: doctor): the
    feature conditions are left out, every other condition is judged as the build will."""
    known = {p.name for p in patches}
    off = dict(recipe.patches_off)
    on = set(recipe.patches_on)
    for key, names in (("disable", off), ("enable", on)):
        unknown = sorted(set(names) - known)
        if unknown:
            raise AssembleError(f"[patches] {key} names unknown patch(es): {', '.join(unknown)}",
                                where=str(recipe.path), fix=f"use names among: {', '.join(sorted(known)) or '(none)'}")
    needed = sorted({f for p in patches for f in p.features + p.absent})
    report = check_tree(tree, needed) if needed and tree is not None else None
    chosen, skipped = [], []
    for p in patches:
        why = None
        if p.name in off:
            why = f"disabled by the recipe: {off[p.name]}"
        elif p.opt_in and p.name not in on:
            why = "opt-in: enable it with [patches] enable = [...] or --patch NAME"
        elif (reason := unmet_condition(p.when, ctx)) is not None:
            why = f"not for this build: {reason}"
        elif report and (lacking := [f for f in p.features if f in report.missing]):
            why = f"not needed: the tree lacks {', '.join(lacking)}"
        elif report and (having := [f for f in p.absent if f in report.present]):
            why = f"not needed: the tree has {', '.join(having)}"
        elif p.shas and sha not in p.shas:
            why = f"not for {sha or 'an unversioned tree'}: the patch lists its commits"
        if why:
            skipped.append((p.name, why))
        else:
            chosen.append(p)
    return chosen, skipped


# --- checking and applying ---------------------------------------------------------

def _git_apply(tree: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess[Any]:
    """git apply in `tree`, which is its own root (proc.git's own_root: else git silently skips the
    patch's paths when a repository sits above the tree)."""
    return git("apply", "--whitespace=nowarn", *extra, str(patch.resolve()), cwd=tree, own_root=True)


def check(tree: Path, patch: Patch, sha: str | None) -> Path:
    """The variant of `patch` that applies cleanly to `tree`; refused, naming the patch and
    the commit, when none does."""
    failures = []
    for variant in patch.files:
        proc = _git_apply(tree, variant, "--check")
        if proc.returncode == 0:
            return variant
        detail = (proc.stderr or proc.stdout).strip() or "git apply --check failed"
        failures.append(f"{variant.name}: {detail}")
    first = failures[0].splitlines()[0]
    tried = f"{len(failures)} variants, e.g. {first}" if len(failures) > 1 else first
    raise AssembleError(f"patch {patch.name} does not apply to llama.cpp {sha or tree} ({tried})",
                        where=str(patch.files[0]),
                        fix=f"refresh the patch for this commit, pin another commit, or disable it in the "
                            f"recipe: [patches] disable = {{ \"{patch.name}\" = \"why\" }}",
                        details="\n".join(failures))


def _git_out(cwd: Path, *args: str) -> str | None:
    proc = git(*args, cwd=cwd, own_root=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _borrow_git(src: Path, dest: Path, sha: str | None) -> None:
    """Give the copy a small .git of its own that reads the source's objects (alternates)
    and sits at the same commit: llama.cpp's CMake asks git for the commit and the build
    number (rev-parse HEAD, rev-list --count HEAD). The source is only read."""
    common = _git_out(src, "rev-parse", "--path-format=absolute", "--git-common-dir")
    head = _git_out(src, "rev-parse", "HEAD") if common else None
    if not common or not head or (sha and head != sha):
        return  # not a git checkout (or not at the sha): build-info says "unknown", as upstream would
    if _git_out(dest, "init", "-q") is None:
        return
    info = dest / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(str(Path(common) / "objects") + "\n")
    if (Path(common) / "shallow").is_file():  # a shallow source: its history ends there too
        shutil.copyfile(Path(common) / "shallow", dest / ".git" / "shallow")
    # An index too: llama.cpp's common/CMakeLists.txt watches .git/index. (ggml's own
    # CMake then reports the commit as "-dirty", which a patched tree is.)
    if (_git_out(dest, "update-ref", "--no-deref", "HEAD", head) is None
            or _git_out(dest, "read-tree", "HEAD") is None):
        shutil.rmtree(dest / ".git")  # half a repository would mislead CMake; none is honest


def patch_set_id(variants: list[Path]) -> str:
    h = hashlib.sha256("".join(f"{v.name}:{sha256_file(v)}\n" for v in variants).encode())
    return h.hexdigest()[:12]


def _stamp_ok(dest: Path, applied: tuple[AppliedPatch, ...]) -> bool:
    try:
        data = json.loads((dest / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return bool(data.get("applied") == [vars(a) for a in applied])


def _fixed(source: SourceTree) -> bool:
    """A verified pinned tree (cache, mirror) names fixed content, so its copy can be reused. A
    user's --source checkout may carry uncommitted changes at the same sha: never reused."""
    return bool(source.sha) and source.provenance.get("kind") != "local"


@dataclass(frozen=True)
class TreePlan:
    """Which patches a build applies and where its tree will be; computed without writing."""
    dest: Path | None                  # None: build the local tree where it is
    chosen: tuple[Patch, ...]
    variants: tuple[Path, ...]
    applied: tuple[AppliedPatch, ...]
    skipped: tuple[tuple[str, str], ...]


def plan_tree(source: SourceTree, recipe: Recipe, ctx: PatchContext, *,
              patches_dir: Path | None = None) -> TreePlan:
    """Select the patches and check each on the pristine tree (git apply --check reads only).

    Copies live at <cache>/trees/<sha>-<patch set>/src and the units build beside them
    (.../build/), so every variant compiles with the same relative paths and ccache
    serves a patched build from an unpatched one except for the patched files. A local
    tree with no patch to apply is built where it is.
    """
    chosen, skipped = select(load_patches(patches_dir), source.path, source.sha, recipe, ctx)
    for name, why in skipped:
        ui.detail(f"patch {name}: {why}")
    if not chosen and not _fixed(source):
        return TreePlan(None, (), (), (), tuple(skipped))
    variants = tuple(check(source.path, p, source.sha) for p in chosen)
    applied = tuple(AppliedPatch(p.name, v.name, sha256_file(v), p.fixes) for p, v in zip(chosen, variants, strict=True))
    key = source.sha if _fixed(source) else "local-" + hashlib.sha256(str(source.path.resolve()).encode()).hexdigest()[:12]
    dest = cache_dir() / "trees" / f"{key}-{patch_set_id(list(variants)) if variants else 'pristine'}" / "src"
    return TreePlan(dest, tuple(chosen), variants, applied, tuple(skipped))


def prepare(source: SourceTree, recipe: Recipe, ctx: PatchContext, *,
            patches_dir: Path | None = None) -> PreparedTree:
    """The tree to build: a copy of the pristine tree with the selected patches applied."""
    plan = plan_tree(source, recipe, ctx, patches_dir=patches_dir)
    skipped = plan.skipped
    if plan.dest is None:
        return PreparedTree(source.path, (), tuple(skipped))
    chosen, variants, applied, dest = plan.chosen, plan.variants, plan.applied, plan.dest
    root = dest.parent
    root.mkdir(parents=True, exist_ok=True)
    # A git sha names fixed content, so a finished copy is reused; a local tree may have
    # changed since, so it is copied afresh.
    if _fixed(source) and dest.is_dir() and _stamp_ok(dest, applied):
        ui.info(f"patched tree: {dest} (reused)")
        return PreparedTree(dest, applied, tuple(skipped))
    ui.step(f"patches: {', '.join(p.name for p in chosen)}")
    with paths.scratch("patch-") as tmp:       # in the cache, so the patched tree is renamed into place
        work = Path(tmp) / "tree"
        # A real copy: hard links would let the patched files write through into the cache.
        # .git is not copied (a full clone's history can be gigabytes); see _borrow_git.
        shutil.copytree(source.path, work, symlinks=True,
                        ignore=lambda d, names: [".git"] if Path(d) == source.path else [])
        _borrow_git(source.path, work, source.sha)
        done: list[str] = []
        for p, variant, a in zip(chosen, variants, applied, strict=True):
            proc = _git_apply(work, variant)
            if proc.returncode != 0:
                raise BuildFailed(f"patch {p.name} applies to the pristine {source.sha or source.path} but not "
                                  f"after {', '.join(done)}: the patches conflict",
                                  where=str(variant), fix="rebase one patch onto the other",
                                  details=(proc.stderr or proc.stdout).strip() or None)
            done.append(p.name)
            ui.info(f"applied {p.name} ({a.file}, sha256 {a.sha256[:12]})")
        (work / STAMP).write_text(json.dumps({"source": str(source.path), "sha": source.sha,
                                              "applied": [vars(a) for a in applied]}, indent=2))
        if dest.exists():
            if _fixed(source) and _stamp_ok(dest, applied):   # another process finished first
                return PreparedTree(dest, applied, tuple(skipped))
            shutil.rmtree(dest)  # unfinished or stale: never trusted
        os.replace(work, dest)
    return PreparedTree(dest, applied, tuple(skipped))
