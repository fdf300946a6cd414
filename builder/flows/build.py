"""The build flow, stage by stage: config -> source -> features -> patches -> toolchains ->
rules -> build units -> merge -> bundle -> manifest -> checks -> swap in.

Each stage is a function of plain data from another package; this module only orders them,
and makes sure nothing is left half-written.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder import paths, ui
from builder.units import cacherelay, cachestats, collect, merge, run, unitfolder
from builder.config import remotecache
from builder.units.plan import UnitPlan, plan_unit
from builder.units.unitfolder import UnitDescription
from builder.check.report import Report
from builder.config import glibc, versions
from builder.config.options import ADOPTED, CONTAINER, RELOCATABLE_UNITY_CMAKE, BuildConfig, UnitConfig
from builder.config.recipe import Recipe
from builder.errors import AssembleError
from builder.flows import publish
from builder.proc import git
from builder.runtime import gpuruntime, manifest
from builder.runtime.bundle import plan_bundle
from builder.runtime.elf import folder_need
from builder.runtime.place import BundleResult, place_bundle
from builder.runtime import licenses
from builder.source import features, patches
from builder.source.fetch import SourceTree, cached_tree, local_tree, pinned_tree
from builder.toolchain import container, provision, rules, survey
from builder.toolchain.detect import Toolchain, distro


@dataclass(frozen=True)
class BuildRequest:
    config: BuildConfig
    out: Path
    check_env: tuple[tuple[str, str], ...] = ()   # extra variables for the device checks only
    verify: bool = True
    verify_static: bool = False                 # only the checks that read files (a runtime for another host)
    keep: int | None = None
    wait: bool = True
    lib_paths: tuple[Path, ...] = ()            # extra folders the bundler searches (e.g. cuBLAS from a wheel)
    unit_out: Path | None = None                # --only-unit --out: where the unit folder is exported


@dataclass(frozen=True)
class Prepared:
    """Everything decided before the first compiler runs."""
    config: BuildConfig                         # units built elsewhere carry what their folders record
    tree: SourceTree
    build_tree: patches.PreparedTree
    feature_report: features.FeatureReport
    plans: tuple[UnitPlan, ...]                 # the units this run builds or merges, in recipe order
    records: dict[str, Any] = field(default_factory=dict)   # unit name -> {"cuda_policy": ..., "hip_policy": ...}
    adopted: dict[str, Any] = field(default_factory=dict)   # unit name -> UnitDescription of a folder built elsewhere


def _adopt(config: BuildConfig) -> tuple[BuildConfig, dict[str, UnitDescription]]:
    """Units named by --unit-from take their targets and defines from their folders."""
    recorded = {u.name: unitfolder.read(u.where.folder_name(), config.recipe, u.name)
                for u in config.units if u.where.kind == ADOPTED}
    if not recorded:
        return config, {}
    units = tuple(unitfolder.as_configured(u, recorded[u.name]) if u.name in recorded else u for u in config.units)
    return dataclasses.replace(config, units=units), recorded


def patch_context(config: BuildConfig, toolchains: dict[str, Toolchain]) -> patches.PatchContext:
    """The patches' view of this build, with the CUDA toolkit its CUDA unit found."""
    cuda_unit = config.cuda_unit()
    tc = toolchains.get(cuda_unit.name) if cuda_unit else None
    return patches.context_for(config, tc.cuda.version if tc and tc.cuda else None)


def _enforce(config: BuildConfig, units: tuple[UnitConfig, ...], toolchains: dict[str, Toolchain],
             blackwell_patch: str | None) -> dict[str, Any]:
    """The rules for every unit: the first refusal stops the build here, before CMake runs."""
    records, host, cached = {}, distro(), provision.cached_toolkits()
    for unit in units:
        ctx = rules.context(config, unit, toolchains[unit.name], blackwell_patch, host, cached)
        where = f"{config.recipe.path}: unit {unit.name}" + (f" ({unit.where.label()})" if unit.where.kind != "host" else "")
        warnings = rules.enforce(ctx, where)
        for finding in warnings:
            ui.warn(finding.means)
        records[unit.name] = {"cuda_policy": rules.cuda_record(ctx) if "cuda" in unit.backends else None,
                              "hip_policy": rules.hip_record(ctx, warnings) if "hip" in unit.backends else None}
    return records


def _engine(config: BuildConfig, units: tuple[UnitConfig, ...]) -> container.Engine | None:
    return container.find_engine(config.engine.value) if any(u.where.kind == CONTAINER for u in units) else None


def prepare(config: BuildConfig) -> Prepared:
    """Source, features, patches, toolchains and rules: every refusal happens here, before CMake runs.
    With --only-unit, that unit alone (the others are built elsewhere)."""
    config, recorded = _adopt(config)
    recipe, wanted = config.recipe, config.wanted()
    tree = local_tree(config.source, recipe) if config.source else pinned_tree(recipe)
    report = features.require(tree.path, recipe)
    ui.info(f"features present: {', '.join(sorted(report.present)) or '(none required)'}")
    toolchains = survey.for_units(config, wanted, recorded, engine=_engine(config, wanted))
    prepared_tree = patches.prepare(tree, recipe, patch_context(config, toolchains))  # says what it applied
    blackwell_patch = rules.blackwell_patch_state([p.name for p in prepared_tree.applied], prepared_tree.skipped)
    records = _enforce(config, wanted, toolchains, blackwell_patch)
    tree_id = ",".join(f"{p.name}:{p.sha256[:12]}" for p in prepared_tree.applied)
    plans = []
    for unit in wanted:
        if unit.name in recorded:
            unitfolder.check_belongs(recorded[unit.name], recipe, unit, tree.sha, tree_id)
            plans.append(unitfolder.adopt(recorded[unit.name], config, unit))
        else:
            plans.append(plan_unit(config, unit, toolchains[unit.name], prepared_tree.path, tree.sha, tree_id))
    _check_remote_cache(config, plans, toolchains, adopted=set(recorded))
    return Prepared(config, tree, prepared_tree, report, tuple(plans), records, recorded)


def _check_remote_cache(config: BuildConfig, plans: list[UnitPlan], toolchains: dict[str, Toolchain],
                        adopted: set[str]) -> None:
    """A shared cache the launcher of each unit compiled here can use, or one line before anything
    compiles (a unit taken from --unit-from compiles nothing here and is not asked)."""
    cache = config.remote_cache.value
    if cache is None:
        return
    assert isinstance(cache, remotecache.RemoteCache)
    for plan in (p for p in plans if p.unit.name not in adopted):
        cmake = toolchains[plan.unit.name].cmake
        if (not plan.in_container and cmake and versions.version_tuple(cmake.version)
                and not versions.satisfies(cmake.version, RELOCATABLE_UNITY_CMAKE)):
            ui.warn(f"unit {plan.unit.name}: cmake {cmake.version} ({cmake.path}) writes libllama's unity sources "
                    "with absolute paths, so they miss the remote cache on machines with another HOME or checkout; "
                    f"CMake {RELOCATABLE_UNITY_CMAKE} shares them (pip install 'cmake>=4')")
        if plan.in_container:
            if cacherelay.relayable(cache):
                ui.info(f"unit {plan.unit.name} reaches the remote cache from its networkless container through "
                        "a unix-socket relay (nothing else)")
            else:
                ui.warn(f"unit {plan.unit.name} builds in container {plan.unit.where.image} without network, and "
                        f"only a Redis cache is relayed into it: it uses its local ccache, not {cache}")
            continue
        if refusal := _cache_refusal(config, plan):
            raise refusal
    ui.info(f"remote compile cache: {cache} ({config.remote_cache.origin})")


def _cache_refusal(config: BuildConfig, plan: UnitPlan) -> AssembleError | None:
    """What build raises (remotecache.check) when the launcher of a unit compiled on this host cannot
    use the remote cache; None when it can, or none is set, or the unit builds in a container (it
    reaches the cache through a relay, or uses its local ccache)."""
    cache = config.remote_cache.value
    if cache is None or plan.in_container:
        return None
    assert isinstance(cache, remotecache.RemoteCache)
    try:
        remotecache.check(cache, plan.launcher or "", f"unit {plan.unit.name} ({config.remote_cache.origin})")
    except AssembleError as e:
        return e
    return None


@dataclass(frozen=True)
class UnitPreview:
    """One unit as `show` tells it: the plan, and the refusal `build` would raise on this host."""
    plan: UnitPlan
    refusal: rules.Finding | None       # the first REFUSE finding of the same rules build enforces,
                                        # else build's refusal of the remote cache


def preview(config: BuildConfig) -> tuple[UnitPreview, ...]:
    """The unit plans as a build would make them, reading only: no fetch, copy, image build or
    configure (the probes of this host's tools are read-only). With the source not fetched yet,
    the tree path (which depends on the patches the tree needs) is a placeholder, and the patches
    the recipe asks for are taken as applying (what the Blackwell rule reads)."""
    units = config.wanted()
    toolchains = survey.for_units(config, units, probe_images=False)
    tree = local_tree(config.source, config.recipe) if config.source else cached_tree(config.recipe.pin.sha)
    sha: str | None
    if tree is None:
        src, tree_id, sha = Path("<cache>/trees/<sha>-<patch set>/src"), "", config.recipe.pin.sha
        blackwell_patch = rules.blackwell_patch_state(config.recipe.patches_on, ())
    else:
        tree_plan = patches.plan_tree(tree, config.recipe, patch_context(config, toolchains))
        src, sha = tree_plan.dest or tree.path, tree.sha
        tree_id = ",".join(f"{p.name}:{p.sha256[:12]}" for p in tree_plan.applied)
        blackwell_patch = rules.blackwell_patch_state([p.name for p in tree_plan.applied], tree_plan.skipped)
    host, cached = distro(), provision.cached_toolkits()
    out = []
    for u in units:
        ctx = rules.context(config, u, toolchains[u.name], blackwell_patch, host, cached)
        refusal = next((f for f in rules.evaluate(ctx) if f.level == rules.REFUSE), None)
        plan = plan_unit(config, u, toolchains[u.name], src, sha, tree_id)
        if refusal is None and (cache_error := _cache_refusal(config, plan)):   # build's next check, in its words
            refusal = rules.Finding("remote-cache", rules.REFUSE, str(config.remote_cache.value),
                                    means=cache_error.what, fix=cache_error.fix or "")
        out.append(UnitPreview(plan, refusal))
    return tuple(out)


def _run(plan: UnitPlan, prepared: Prepared) -> None:
    """Compile one unit on the host or in its container, and describe it for --unit-from."""
    if plan.unit.name in prepared.adopted:
        ui.step(f"unit {plan.unit.name}: built elsewhere, taken from {plan.build_dir}")
        return
    engine = container.find_engine(prepared.config.engine.value) if plan.in_container else None
    run.run_unit(plan, engine)
    unitfolder.write(plan)


def build_unit(req: BuildRequest) -> Path:
    """--only-unit: compile one unit of a multi-unit recipe for another machine's --unit-from. With
    --out, its bin/ and assemble-unit.json are exported there (a CI artifact), under the same rules
    as a runtime's --out: refused before anything is compiled unless new, empty or ours."""
    source = Path(req.config.source).expanduser() if req.config.source else None
    target = None if req.unit_out is None else publish.check_destination(req.unit_out, cache=paths.cache_dir(),
                                                                        source=source)
    prepared = prepare(req.config)
    plan = prepared.plans[0]
    _run(plan, prepared)
    collect.collect_unit(plan)  # every target and module it owes is there
    folder = plan.build_dir
    if target is not None:
        publish.publish(target, lambda staged: unitfolder.export(plan.build_dir, staged), wait=req.wait, keep=req.keep,
                       protect=[("the --source tree", source)] if source else [])
        folder = target.path
    ui.step(ui.ok(f"unit {plan.unit.name} ready: {folder}"))
    ui.info(f"carry {folder.name}/ (bin/ and {unitfolder.UNIT_FILE}) to the merging machine, then: "
            f"assemble build --recipe {req.config.recipe.name} --unit-from {plan.unit.name}=DIR")
    return folder


def build(req: BuildRequest) -> Path:
    recipe = req.config.recipe
    lib_dirs = list(req.lib_paths)
    source = Path(req.config.source).expanduser() if req.config.source else None

    def fill(staged: Path, scratch: Path) -> None:
        ui.step(f"recipe {recipe.name}: {recipe.description}")
        prepared = prepare(req.config)
        outputs = []
        for plan in prepared.plans:
            _run(plan, prepared)
            outputs.append(collect.collect_unit(plan))
        own = merge.merge_units(outputs)
        ui.step(f"bundle into {staged.name}")
        bundle_plan = plan_bundle(own, recipe=recipe, search_dirs=lib_dirs + _toolchain_lib_dirs(prepared.plans))
        result = place_bundle(bundle_plan, staged)
        result = licenses.add_licenses(result, staged, licenses.tree_license(prepared.tree.path, ()),
                                       stated=recipe.bundle_licenses, roots=_toolkit_roots(prepared.plans))
        _manifest(recipe, prepared, result, staged).write(staged)

    def check(staged: Path) -> Report:
        from builder.check import verify
        return verify.verify_runtime(staged, recipe=recipe, extra_env=dict(req.check_env), static=req.verify_static)

    # The scratch folder of the build (checks, probes, the compilers' TMPDIR) is named with our pid under
    # the cache, so a killed build leaves nothing in /tmp: the next run removes it (paths.clean_stale_scratch).
    out = publish.publish_runtime(req.out, fill, scratch="build-", reads=_inputs(req, lib_dirs), source=source,
                                  wait=req.wait, keep=req.keep, check=check if req.verify else None, scoped_tmp=True)
    assert out is not None
    return out


def _inputs(req: BuildRequest, lib_dirs: list[Path]) -> list[tuple[str, Path]]:
    """Folders the build reads besides the source: the output may be none of them, hold none and lie
    inside none, and --keep never deletes one."""
    return ([(f"the --unit-from folder of {u.name}", Path(u.where.folder_name()).expanduser()) for u in req.config.units
             if u.where.kind == ADOPTED]
            + [("a --lib-path folder", d) for d in lib_dirs])


def _toolkit_roots(plans: tuple[UnitPlan, ...]) -> list[Path]:
    """The CUDA and ROCm installs the units used: a vendor file from one is under its licence texts."""
    roots = [Path(p.toolchain[k][root]) for p in plans for k, root in (("cuda", "root"), ("rocm", "path"))
             if isinstance(p.toolchain.get(k), dict) and p.toolchain[k].get(root)]
    return list(dict.fromkeys(r for r in roots if r.is_dir()))


def _toolchain_lib_dirs(plans: tuple[UnitPlan, ...]) -> list[Path]:
    """Library folders of the toolchains the units used (CUDA, ROCm): the bundler searches them."""
    dirs = []
    for plan in plans:
        cuda = plan.toolchain.get("cuda")
        if cuda:
            root = Path(cuda["root"])
            dirs += [root / "lib64", root / "lib", *sorted(root.glob("targets/*-linux/lib"))]   # x86_64, sbsa
        rocm = plan.toolchain.get("rocm")
        if rocm:
            dirs += [Path(rocm["path"]) / "lib", Path(rocm["path"]) / "lib64"]
    return [d for d in dirs if d.is_dir()]


def _cache_stats(build_dir: Path) -> dict[str, Any] | None:
    """The compile cache's counters of the folder's last build (None: no stats, e.g. nothing was compiled)."""
    try:
        return dict(json.loads((build_dir / cachestats.STATS_FILE).read_text()))
    except (OSError, ValueError):
        return None


def _commit_time(tree: Path, sha: str | None) -> int | None:
    if not sha:
        return None
    proc = git("log", "-1", "--format=%ct", sha, cwd=tree)
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def _manifest(recipe: Recipe, prepared: Prepared, result: BundleResult, staged: Path) -> manifest.Manifest:
    tree = prepared.tree
    plans = prepared.plans
    toolkits = {k: str(p.toolchain[k].get("version") or "") for p in plans for k in ("cuda", "rocm")
                if isinstance(p.toolchain.get(k), dict)}
    return manifest.Manifest(
        recipe=manifest.RecipeRecord(recipe.name, recipe.description, tuple(recipe.backends), tuple(recipe.targets),
                                     recipe.path.name),
        llama_cpp=manifest.SourceRecord(
            sha=tree.sha, commit_time=_commit_time(tree.path, tree.sha),
            source=manifest.Provenance.from_dict(tree.provenance),
            features=dict(prepared.feature_report.present),
            patches=tuple(manifest.PatchRecord(p.name, p.file, p.sha256, p.fixes) for p in prepared.build_tree.applied),
            build=recipe.pin.build if tree.sha == recipe.pin.sha else None),
        gpu_targets=manifest.GpuTargets(cuda=tuple(str(a) for p in plans for a in p.unit.cuda_archs),
                                        hip=tuple(str(t) for p in plans for t in p.unit.hip_targets)),
        units=tuple(manifest.UnitRecord(
            name=p.unit.name, backends=tuple(p.unit.backends),
            container=(prepared.adopted[p.unit.name].container if p.unit.name in prepared.adopted
                       else p.unit.where.image),
            cuda_policy=prepared.records.get(p.unit.name, {}).get("cuda_policy"),
            hip_policy=prepared.records.get(p.unit.name, {}).get("hip_policy"),
            built_elsewhere=prepared.adopted[p.unit.name].origin() if p.unit.name in prepared.adopted else None,
            build_dir=str(p.build_dir), configure=tuple(p.configure), build=tuple(p.build), defines=dict(p.defines),
            toolchain=p.toolchain,
            environment=None if p.unit.name in prepared.adopted else p.environment.as_dict(),
            cache=_cache_stats(p.build_dir)) for p in plans),
        glibc_min=result.glibc_min, glibcxx_min=result.glibcxx_min, size_by_role=dict(result.size_by_role),
        glibc_floor=manifest.GlibcFloor(*glibc.default_promise(recipe.glibc_floor, built_here=not any(
                                            p.unit.where.kind in (CONTAINER, ADOPTED) for p in plans)),
                                        needed_by=need.file if (need := folder_need(staged)) else None),
        system_libs=result.system_libs, files=result.files, symlinks=result.symlinks,
        config=prepared.config.as_dict(),
        gpu_runtimes=gpuruntime.describe(staged, [f.path for f in result.files], toolkits),
        licenses=result.licenses)
