"""The build flow, stage by stage: recipe -> source -> features -> patches ->
toolchain policy -> build units -> merge -> bundle -> manifest -> checks -> swap in.

Each stage is a function of plain data from another module; this one only
orders them, and makes sure nothing is left half-written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from builder import outdir, paths, ui
from builder.build import cmake
from builder.build import collect
from builder.toolchain import container
from builder.toolchain import cudapolicy
from builder.source import features
from builder.runtime import manifest
from builder.source import patches
from builder.toolchain import rocmpolicy
from builder.toolchain import detect as toolchain
from builder.build import unitfolder
from builder.runtime.bundle import plan_bundle
from builder.runtime.place import place_bundle
from builder.errors import AssembleError
from builder.config.recipe import Mirror, Recipe
from builder.source.fetch import SourceTree, cached_tree, local_tree, pinned_tree


@dataclass(frozen=True)
class BuildRequest:
    recipe: Recipe
    out: Path
    source: str | None = None
    overrides: cmake.Overrides = field(default_factory=cmake.Overrides)
    check_env: tuple[tuple[str, str], ...] = ()   # extra variables for the device checks only
    verify: bool = True
    verify_static: bool = False                 # only the checks that read files (a runtime for another host)
    keep: int | None = None
    wait: bool = True
    lib_paths: tuple[str, ...] = ()             # extra folders the bundler searches (e.g. cuBLAS from a wheel)
    only_unit: str | None = None                # build this unit alone, for --unit-from elsewhere; no runtime


@dataclass(frozen=True)
class Prepared:
    """Everything decided before the first compiler runs."""
    tree: SourceTree
    build_tree: patches.PreparedTree
    feature_report: features.FeatureReport
    plans: tuple[cmake.UnitPlan, ...]
    containers: tuple[str | None, ...]          # per plan: the container it builds in, or None (host)
    cuda_policy: dict                           # unit name -> what the CUDA policy recorded
    hip_policy: dict                            # unit name -> what the ROCm policy recorded
    adopted: dict = field(default_factory=dict)  # unit name -> description of a unit folder built elsewhere


def _cuda_toolkit_for(recipe: Recipe, o: cmake.Overrides,
                     adopted: dict | None = None) -> tuple[toolchain.CudaToolkit | None, str | None]:
    """The toolkit the recipe's CUDA unit compiles with: the host's, its container's, or (a unit built
    elsewhere) the one its folder records."""
    unit = next((u for u in recipe.units if "cuda" in u.backends), None)
    if unit is None:
        return None, None
    if adopted and unit.name in adopted:
        return unitfolder.recorded_cuda(adopted[unit.name])[0], adopted[unit.name].get("container")
    name = container.unit_container(unit.container, o.container)
    if name is None:
        return toolchain.cuda_toolkit(o.cuda_root), None
    engine = container.find_engine(o.engine)
    return container.probe_cuda(engine, container.ensure_image(engine, name)), name


def _patch_context(recipe: Recipe, overrides: cmake.Overrides, cuda, adopted: dict | None = None) -> patches.PatchContext:
    archs = tuple(overrides.cuda_archs or (recipe.cuda.architectures if recipe.cuda else ()))
    cuda_unit = next((u.name for u in recipe.units if "cuda" in u.backends), None)
    if adopted and cuda_unit in adopted:
        archs = unitfolder.recorded_cuda(adopted[cuda_unit])[1]
    return patches.PatchContext(backends=recipe.backends, cuda_version=cuda.version if cuda else None,
                                cuda_archs=archs,
                                backend_dl=dict(cmake.BASE_DEFINES + recipe.defines).get("GGML_BACKEND_DL") == "ON")


def preview(recipe: Recipe, source: str | None, overrides: cmake.Overrides) -> tuple[cmake.UnitPlan, ...]:
    """The unit plans as a build would make them, without fetching, copying or configuring.

    With the source not fetched yet, the tree path (which depends on the patches the tree
    needs) is shown as a placeholder.
    """
    recipe = _with_patches(recipe, overrides)
    tree = local_tree(source, recipe) if source else cached_tree(recipe.pin.sha)
    if tree is None:
        src, tree_id, sha = Path("<cache>/trees/<sha>-<patch set>/src"), "", recipe.pin.sha
    else:
        cuda = toolchain.cuda_toolkit(overrides.cuda_root) if "cuda" in recipe.backends else None
        plan = patches.plan_tree(tree, recipe, _patch_context(recipe, overrides, cuda))
        src, sha = plan.dest or tree.path, tree.sha
        tree_id = ",".join(f"{p.name}:{p.sha256[:12]}" for p in plan.applied)
    return tuple(cmake.plan_unit(recipe, unit, src, sha, overrides, tree_id, strict=False) for unit in recipe.units)


def _with_patches(recipe: Recipe, overrides: cmake.Overrides) -> Recipe:
    if not overrides.patches:
        return recipe
    return dataclasses.replace(recipe, patches_on=tuple(dict.fromkeys(recipe.patches_on + overrides.patches)))


def prepare(recipe: Recipe, source: str | None, overrides: cmake.Overrides, only_unit: str | None = None) -> Prepared:
    """Source, features, patches, toolkit policy and plans: every refusal happens here, before CMake runs.

    Units named by --unit-from are adopted from their folders instead of planned; with only_unit,
    that unit alone is planned (the others are built elsewhere)."""
    recipe = _with_patches(recipe, overrides)
    imported = dict(overrides.unit_from)
    unitfolder.check_names(recipe, list(imported) + ([only_unit] if only_unit else []))
    if only_unit and only_unit in imported:
        raise AssembleError(f"unit {only_unit} is both to be built (--only-unit) and taken from a folder (--unit-from)",
                            where="--only-unit", fix="drop one of the two")
    adopted = {name: unitfolder.read(folder, recipe, name) for name, folder in imported.items()}
    wanted = [u for u in recipe.units if (u.name == only_unit if only_unit else True)]
    tree = local_tree(source, recipe) if source else pinned_tree(with_mirrors(recipe, overrides.mirrors))
    report = features.require(tree.path, recipe)
    ui.info(f"features present: {', '.join(sorted(report.present)) or '(none required)'}")
    # only a CUDA unit built or merged here needs its toolkit probed (an --only-unit hip build of
    # rocm-cuda128 must not need the container engine of the CUDA unit)
    cuda, cuda_container = (_cuda_toolkit_for(recipe, overrides, adopted)
                            if any("cuda" in u.backends for u in wanted) else (None, None))
    ctx = _patch_context(recipe, overrides, cuda, adopted)
    archs = ctx.cuda_archs
    prepared_tree = patches.prepare(tree, recipe, ctx)  # says what it applied
    policy = {}
    for unit in (u for u in wanted if "cuda" in u.backends):
        where = f"{recipe.path}: unit {unit.name}" + (f" (container {cuda_container})" if cuda_container else "")
        result = cudapolicy.check_cuda_unit(
            cuda, archs, where=where,
            accept_regression=overrides.accept_blackwell_regression or recipe.cuda.accept_blackwell_regression,
            patched_fattn=cudapolicy.BLACKWELL_PATCH in {p.name for p in prepared_tree.applied},
            constraint=recipe.cuda.toolkit)
        if result.note:
            ui.warn(result.note)
        policy[unit.name] = result.as_manifest()
    hip_policy = {}
    for unit in (u for u in wanted if "hip" in u.backends):
        # an adopted HIP unit still needs this host's ROCm: its libraries and kernel data get bundled
        targets = (unitfolder.recorded_hip_targets(adopted[unit.name]) if unit.name in adopted
                   else (overrides.hip_target,) if overrides.hip_target else recipe.hip.targets)
        hip_policy[unit.name] = rocmpolicy.check_hip_unit(
            toolchain.rocm(overrides.rocm_path), targets,
            multi_arch_risk=recipe.hip.multi_arch_risk, where=f"{recipe.path}: unit {unit.name}",
            rocm_path=overrides.rocm_path)
        for note in hip_policy[unit.name].get("notes", []):
            ui.warn(note)
    tree_id = ",".join(f"{p.name}:{p.sha256[:12]}" for p in prepared_tree.applied)
    plans = tuple(unitfolder.adopt(adopted[unit.name], recipe, unit.name, tree.sha, tree_id) if unit.name in adopted
                  else cmake.plan_unit(recipe, unit, prepared_tree.path, tree.sha, overrides, tree_id,
                                       strict=container.unit_container(unit.container, overrides.container) is None)
                  for unit in wanted)
    containers = tuple(None if u.name in adopted else container.unit_container(u.container, overrides.container)
                       for u in wanted)
    return Prepared(tree, prepared_tree, report, plans, containers, policy, hip_policy, adopted)


def _run_plan(plan: cmake.UnitPlan, where: str | None, engine: str) -> None:
    """Compile one unit on the host or in its container, and describe it for --unit-from."""
    if where:
        container.run_unit(container.plan_for(plan, container=where, engine=container.find_engine(engine)))
    else:
        cmake.run_unit(plan)
    unitfolder.write(plan, where)


def build_unit(req: BuildRequest) -> Path:
    """--only-unit: compile one unit of a multi-unit recipe for another machine's --unit-from."""
    prepared = prepare(req.recipe, req.source, req.overrides, only_unit=req.only_unit)
    plan, where = prepared.plans[0], prepared.containers[0]
    _run_plan(plan, where, req.overrides.engine)
    collect.collect_unit(plan)  # every target and module it owes is there
    ui.step(ui.ok(f"unit {plan.unit.name} ready: {plan.build_dir}"))
    ui.info(f"copy its bin/ and {unitfolder.UNIT_FILE} to the merging machine, then: "
            f"assemble build --recipe {req.recipe.name} --unit-from {plan.unit.name}=DIR")
    return plan.build_dir


def with_mirrors(recipe: Recipe, extra: tuple[str, ...]) -> Recipe:
    """The recipe with command-line mirrors put in front of its own."""
    if not extra:
        return recipe
    mirrors = tuple(Mirror(kind="git", url=m) if "://" in m or m.startswith("git@") else Mirror(kind="local", path=m)
                    for m in extra)
    return dataclasses.replace(recipe, pin=dataclasses.replace(recipe.pin, mirrors=mirrors + recipe.pin.mirrors))


def build(req: BuildRequest) -> Path:
    recipe = req.recipe
    lib_dirs = _lib_paths(req.lib_paths)  # a typo fails now, not after the compile
    # --out is checked first (reads only, well under a second): a folder this tool did not make,
    # or a dangerous one, is refused in one line before anything is fetched, compiled or written.
    target = outdir.check_destination(req.out, cache=paths.cache_dir(),
                                      source=Path(req.source).expanduser() if req.source else None,
                                      inputs=_inputs(req, lib_dirs))
    out = target.path
    ui.step(f"recipe {recipe.name}: {recipe.description}")
    # Temporary folders of this build (checks, probes) go under the cache, named with our pid, so a
    # killed build leaves nothing in /tmp: the next run removes them (paths.clean_stale_scratch).
    with paths.scratch("build-") as scratch, _tempdir(scratch), outdir.locked(target, wait=req.wait):
        outdir.clear_leftovers(target)
        # made before the compile, so an unwritable --out fails in a second; removed on any error,
        # and only while it still is the folder made here (never the previous runtime)
        with outdir.staged(target) as staging:
            prepared = prepare(recipe, req.source, req.overrides)
            outputs = []
            for plan, where in zip(prepared.plans, prepared.containers):
                if plan.unit.name in prepared.adopted:
                    ui.step(f"unit {plan.unit.name}: built elsewhere, taken from {plan.build_dir}")
                else:
                    _run_plan(plan, where, req.overrides.engine)
                outputs.append(collect.collect_unit(plan))
            own = collect.merge_units(outputs)
            ui.step(f"bundle into {staging.path.name}")
            bundle_plan = plan_bundle(own, recipe=recipe, search_dirs=lib_dirs + _toolchain_lib_dirs(prepared.plans))
            result = place_bundle(bundle_plan, staging.path)
            _manifest(recipe, prepared, result).write(staging.path)
            if req.verify:
                from builder.check import verify
                report = verify.verify_runtime(staging.path, recipe=recipe, extra_env=dict(req.check_env),
                                               static=req.verify_static)
                verify.render(report)
                if not report.passed:
                    raise AssembleError("the new runtime failed verification; the previous runtime is untouched",
                                        where=str(out), fix="see the failed checks above", code=1)
            outdir.swap_in(target, staging, keep=req.keep)
    ui.step(ui.ok(f"runtime ready: {out}"))
    return out


def _inputs(req: BuildRequest, lib_dirs: list[Path]) -> list[tuple[str, Path]]:
    """Folders the build reads besides the source: the output may be neither one nor hold one."""
    return ([(f"the --unit-from folder of {name}", Path(folder).expanduser()) for name, folder in req.overrides.unit_from]
            + [("a --lib-path folder", d) for d in lib_dirs])


@contextlib.contextmanager
def _tempdir(folder: Path):
    """The temporary folder of this process (tempfile) and of the tools it runs (TMPDIR: a compiler
    killed with us leaves its files there too) for the duration of the build."""
    old, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = old
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env


def _lib_paths(paths: tuple[str, ...]) -> list[Path]:
    out = []
    for p in paths:
        if not Path(p).is_dir():
            raise AssembleError("no such folder", where=f"--lib-path {p}",
                                fix="name a folder holding shared libraries (e.g. a wheel's nvidia/cublas/lib)")
        out.append(Path(p).resolve())
    return out


def _toolchain_lib_dirs(plans: tuple[cmake.UnitPlan, ...]) -> list[Path]:
    """Library folders of the toolchains the units used (CUDA, ROCm): the bundler searches them."""
    dirs = []
    for plan in plans:
        cuda = plan.toolchain.get("cuda")
        if cuda:
            root = Path(cuda["root"])
            dirs += [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]
        rocm = plan.toolchain.get("rocm")
        if rocm:
            dirs += [Path(rocm["path"]) / "lib", Path(rocm["path"]) / "lib64"]
    return [d for d in dirs if d.is_dir()]


def _commit_time(tree: Path, sha: str | None) -> int | None:
    if not sha:
        return None
    proc = subprocess.run(["git", "log", "-1", "--format=%ct", sha], cwd=tree, capture_output=True, text=True)
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def _manifest(recipe: Recipe, prepared: Prepared, result) -> manifest.Manifest:
    tree = prepared.tree
    plans = prepared.plans
    return manifest.Manifest(
        recipe=manifest.RecipeRecord(recipe.name, recipe.description, tuple(recipe.backends), tuple(recipe.targets),
                                     recipe.path.name),
        llama_cpp=manifest.SourceRecord(
            sha=tree.sha, commit_time=_commit_time(tree.path, tree.sha),
            source=manifest.Provenance.from_dict(tree.provenance),
            features=dict(prepared.feature_report.present),
            patches=tuple(manifest.PatchRecord(p.name, p.file, p.sha256, p.fixes) for p in prepared.build_tree.applied)),
        gpu_targets=manifest.GpuTargets(
            cuda=tuple(a for p in plans for a in dict(p.defines).get("CMAKE_CUDA_ARCHITECTURES", "").split(";") if a),
            hip=tuple(t for p in plans for t in dict(p.defines).get("GPU_TARGETS", "").split(";") if t)),
        units=tuple(manifest.UnitRecord(
            name=p.unit.name, backends=tuple(p.unit.backends), container=c,
            cuda_policy=prepared.cuda_policy.get(p.unit.name), hip_policy=prepared.hip_policy.get(p.unit.name),
            built_elsewhere=(unitfolder.origin(prepared.adopted[p.unit.name]) if p.unit.name in prepared.adopted
                             else None),
            build_dir=str(p.build_dir), configure=tuple(p.configure), build=tuple(p.build), defines=dict(p.defines),
            toolchain=p.toolchain) for p, c in zip(plans, prepared.containers)),
        glibc_min=result.glibc_min, glibcxx_min=result.glibcxx_min, size_by_role=dict(result.size_by_role),
        system_libs=result.system_libs, files=result.files, symlinks=result.symlinks)
