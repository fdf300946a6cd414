"""Check and apply the shipped patches on a copy of the pristine source tree.

Each patch is two files in patches/: NAME.patch (a unified diff, paths a/ b/ from the
llama.cpp root) and NAME.toml (what it fixes, which trees it applies to, under which
build conditions); the format is documented in patches/README.md.

Order of work: select the patches whose conditions hold; check every one with
`git apply --check` against the pristine tree (nothing is copied before all pass);
then copy the tree once, apply them in order, and rename the copy into place. The
source cache is never written to.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from builder import ui
from builder.errors import AssembleError, BuildFailed
from builder.features import check_tree, lookup
from builder.paths import cache_dir, data_dir
from builder.recipe import SHA_RE, Recipe
from builder.source import SourceTree

STAMP = ".assemble-patched.json"   # inside a finished patched tree; its presence means complete


@dataclass(frozen=True)
class PatchContext:
    """What is being built, as far as a patch's conditions care."""
    backends: tuple[str, ...]
    cuda_version: str | None           # the CUDA toolkit in use, e.g. "12.8"; None without CUDA
    cuda_archs: tuple[str, ...]        # as in the recipe: "90", "120a", "86-real"
    backend_dl: bool


@dataclass(frozen=True)
class Conditions:
    backend_dl: bool | None = None
    backends: tuple[str, ...] = ()     # any of them is built
    cuda_toolkit: str | None = None    # version constraint: ">=13", ">=12.4,<13", "==12.8"
    cuda_archs: tuple[str, ...] = ()   # any of them is targeted (compared by number: 120a ~ 120)


@dataclass(frozen=True)
class Patch:
    name: str
    file: Path
    fixes: str
    features: tuple[str, ...] = ()     # the tree must have all of them
    absent: tuple[str, ...] = ()       # ... and none of these (e.g. the upstream fix)
    shas: tuple[str, ...] = ()         # if given, only these commits
    when: Conditions = Conditions()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.file.read_bytes()).hexdigest()


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

_TOP = {"name", "patch", "fixes", "applies", "when"}
_APPLIES = {"features", "absent", "shas"}
_WHEN = {"backend_dl", "backends", "cuda_toolkit", "cuda_archs"}
_VERSION_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def _fail(path: Path, key: str, what: str, fix: str) -> AssembleError:
    return AssembleError(what, where=f"{path}: {key}" if key else str(path), fix=fix)


def _strings(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(path, key, "expected a list of strings", f'write {key} = ["..."]')
    return tuple(value)


def parse_version_spec(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """">=12.4,<13" -> [(">=", (12, 4)), ("<", (13,))]; ValueError if malformed."""
    out = []
    for part in spec.split(","):
        m = _VERSION_RE.match(part)
        if not m:
            raise ValueError(f"{part.strip()!r} is not a comparison like >=13 or <12.8")
        out.append((m.group(1), tuple(int(x) for x in m.group(2).split("."))))
    return out


def version_matches(version: str, spec: str) -> bool:
    """Compare dotted versions numerically, padding with zeros (13 == 13.0)."""
    have = tuple(int(x) for x in re.findall(r"\d+", version)[:4])
    for op, want in parse_version_spec(spec):
        n = max(len(have), len(want))
        a, b = have + (0,) * (n - len(have)), want + (0,) * (n - len(want))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


def _arch_number(arch: str) -> str:
    """"120a-real" -> "120": the compute capability, without feature suffix or code kind."""
    m = re.match(r"^(?:sm_|compute_)?(\d+)", arch.strip())
    return m.group(1) if m else arch


def load_patch(meta: Path) -> Patch:
    try:
        data = tomllib.loads(meta.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise _fail(meta, "", f"cannot read patch metadata ({exc})", "fix the TOML") from None
    unknown = set(data) - _TOP
    if unknown:
        raise _fail(meta, ", ".join(sorted(unknown)), "unknown key(s)", f"use only: {', '.join(sorted(_TOP))}")
    for need in ("name", "patch", "fixes"):
        if not isinstance(data.get(need), str) or not data[need].strip():
            raise _fail(meta, need, f"missing '{need}'", f'add {need} = "..."')
    if data["name"] != meta.stem:
        raise _fail(meta, "name", f"name {data['name']!r} differs from the file name {meta.stem!r}",
                    "name the metadata file NAME.toml")
    file = meta.parent / data["patch"]
    if not file.is_file() or file.parent != meta.parent:
        raise _fail(meta, "patch", f"no patch file {data['patch']!r} beside the metadata",
                    "put the .patch file in patches/ and name it here")
    applies = data.get("applies", {})
    when = data.get("when", {})
    for key, table, allowed in (("applies", applies, _APPLIES), ("when", when, _WHEN)):
        if not isinstance(table, dict) or set(table) - allowed:
            raise _fail(meta, key, f"unknown key(s) in [{key}]", f"use only: {', '.join(sorted(allowed))}")
    features = _strings(meta, "applies.features", applies.get("features", []))
    absent = _strings(meta, "applies.absent", applies.get("absent", []))
    lookup(features + absent)  # unknown feature names are refused here, not at build time
    shas = _strings(meta, "applies.shas", applies.get("shas", []))
    for sha in shas:
        if not SHA_RE.match(sha):
            raise _fail(meta, "applies.shas", f"{sha!r} is not a full 40-hex sha", "list full commit shas")
    if "backend_dl" in when and not isinstance(when["backend_dl"], bool):
        raise _fail(meta, "when.backend_dl", "expected true or false", "write backend_dl = true")
    toolkit = when.get("cuda_toolkit")
    if toolkit is not None:
        try:
            parse_version_spec(toolkit if isinstance(toolkit, str) else "")
        except ValueError as exc:
            raise _fail(meta, "when.cuda_toolkit", str(exc), 'write cuda_toolkit = ">=13" (comma means and)') from None
    conditions = Conditions(backend_dl=when.get("backend_dl"),
                            backends=_strings(meta, "when.backends", when.get("backends", [])),
                            cuda_toolkit=toolkit,
                            cuda_archs=_strings(meta, "when.cuda_archs", when.get("cuda_archs", [])))
    return Patch(name=data["name"], file=file, fixes=" ".join(data["fixes"].split()), features=features,
                 absent=absent, shas=shas, when=conditions)


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
        if not version_matches(ctx.cuda_version, c.cuda_toolkit):
            return f"CUDA {ctx.cuda_version} does not satisfy {c.cuda_toolkit}"
    if c.cuda_archs:
        wanted = {_arch_number(a) for a in c.cuda_archs}
        if not wanted & {_arch_number(a) for a in ctx.cuda_archs}:
            return f"no CUDA architecture among {', '.join(c.cuda_archs)} is targeted"
    return None


def select(patches: list[Patch], tree: Path, sha: str | None, recipe: Recipe,
           ctx: PatchContext) -> tuple[list[Patch], list[tuple[str, str]]]:
    """(patches to apply, (name, why not) for the others)."""
    known = {p.name for p in patches}
    off = dict(recipe.patches_off)
    unknown = sorted(set(off) - known)
    if unknown:
        raise AssembleError(f"[patches] disable names unknown patch(es): {', '.join(unknown)}",
                            where=str(recipe.path), fix=f"use names among: {', '.join(sorted(known)) or '(none)'}")
    needed = sorted({f for p in patches for f in p.features + p.absent})
    report = check_tree(tree, needed) if needed else None
    chosen, skipped = [], []
    for p in patches:
        why = None
        if p.name in off:
            why = f"disabled by the recipe: {off[p.name]}"
        elif (reason := unmet_condition(p.when, ctx)) is not None:
            why = f"not for this build: {reason}"
        elif lacking := [f for f in p.features if f in report.missing]:
            why = f"not needed: the tree lacks {', '.join(lacking)}"
        elif having := [f for f in p.absent if f in report.present]:
            why = f"not needed: the tree has {', '.join(having)}"
        elif p.shas and sha not in p.shas:
            why = f"not for {sha or 'an unversioned tree'}: the patch lists its commits"
        if why:
            skipped.append((p.name, why))
        else:
            chosen.append(p)
    return chosen, skipped


# --- checking and applying ---------------------------------------------------------

def _git_apply(tree: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess:
    """git apply in `tree`, which is its own root: a repository above it must not be found,
    or git would treat the tree as a subdirectory and silently skip the patch's paths."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CEILING_DIRECTORIES=str(tree.resolve().parent), LC_ALL="C")
    return subprocess.run(["git", "apply", "--whitespace=nowarn", *extra, str(patch.resolve())],
                          cwd=tree, env=env, capture_output=True, text=True)


def check(tree: Path, patch: Patch, sha: str | None) -> None:
    """Refuse, naming the patch and the commit, if `patch` does not apply cleanly to `tree`."""
    proc = _git_apply(tree, patch.file, "--check")
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        first = detail.splitlines()[0] if detail else "git apply --check failed"
        raise AssembleError(f"patch {patch.name} does not apply to llama.cpp {sha or tree} ({first})",
                            where=str(patch.file),
                            fix=f"refresh the patch for this commit, pin another commit, or disable it in the "
                                f"recipe: [patches] disable = {{ \"{patch.name}\" = \"why\" }}",
                            details=detail or None)


def patch_set_id(patches: list[Patch]) -> str:
    h = hashlib.sha256("".join(f"{p.name}:{p.sha256}\n" for p in patches).encode())
    return h.hexdigest()[:12]


def _stamp_ok(dest: Path, applied: tuple[AppliedPatch, ...]) -> bool:
    try:
        data = json.loads((dest / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return data.get("applied") == [vars(a) for a in applied]


def prepare(source: SourceTree, recipe: Recipe, ctx: PatchContext, *,
            patches_dir: Path | None = None) -> PreparedTree:
    """The tree to build: the pristine one when no patch applies, else a patched copy."""
    patches = load_patches(patches_dir)
    chosen, skipped = select(patches, source.path, source.sha, recipe, ctx)
    for name, why in skipped:
        ui.detail(f"patch {name}: {why}")
    if not chosen:
        return PreparedTree(source.path, (), tuple(skipped))
    for p in chosen:  # all checked on the pristine tree before anything is copied
        check(source.path, p, source.sha)
    applied = tuple(AppliedPatch(p.name, p.file.name, p.sha256, p.fixes) for p in chosen)
    key = source.sha or "local-" + hashlib.sha256(str(source.path.resolve()).encode()).hexdigest()[:12]
    root = cache_dir() / "trees"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"{key}-{patch_set_id(chosen)}"
    # A git sha names fixed content, so a finished copy is reused; a local tree may have
    # changed since, so it is copied afresh.
    if source.sha and dest.is_dir() and _stamp_ok(dest, applied):
        ui.info(f"patched tree: {dest} (reused)")
        return PreparedTree(dest, applied, tuple(skipped))
    ui.step(f"patches: {', '.join(p.name for p in chosen)}")
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{dest.name}-") as tmp:
        work = Path(tmp) / "tree"
        # A full copy (with .git, which CMake asks for the build number); hard links
        # would let the patched files write through into the cache.
        shutil.copytree(source.path, work, symlinks=True)
        done: list[str] = []
        for p in chosen:
            proc = _git_apply(work, p.file)
            if proc.returncode != 0:
                raise BuildFailed(f"patch {p.name} applies to the pristine {source.sha or source.path} but not "
                                  f"after {', '.join(done)}: the patches conflict",
                                  where=str(p.file), fix="rebase one patch onto the other",
                                  details=(proc.stderr or proc.stdout).strip() or None)
            done.append(p.name)
            ui.info(f"applied {p.name} ({p.sha256[:12]})")
        (work / STAMP).write_text(json.dumps({"source": str(source.path), "sha": source.sha,
                                              "applied": [vars(a) for a in applied]}, indent=2))
        if dest.exists():
            if source.sha and _stamp_ok(dest, applied):   # another process finished first
                return PreparedTree(dest, applied, tuple(skipped))
            shutil.rmtree(dest)  # unfinished or stale: never trusted
        os.replace(work, dest)
    return PreparedTree(dest, applied, tuple(skipped))
