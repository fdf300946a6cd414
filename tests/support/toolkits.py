"""Judge a toolkit by the build's own rules (builder.toolchain.rules), the way the pipeline does for
one unit: the tests of the CUDA and ROCm rules speak through these two calls."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from builder.config.options import HOST, CliOptions, resolve
from builder.config.recipe import CudaSettings, HipSettings, load_recipe
from builder.config.targets import CudaArch, GfxTarget
from builder.toolchain import rules
from builder.toolchain.detect import CudaToolkit, Distro, RocmInstall, Tool, Toolchain

_TOOLS = dict(cmake=Tool("cmake", "/usr/bin/cmake", "3.31.6"), ninja=Tool("ninja", "/usr/bin/ninja", "1.12.1"),
              cc=Tool("cc", "/usr/bin/cc", "gcc 12"), cxx=Tool("c++", "/usr/bin/c++", "g++ 12"),
              patchelf=Tool("patchelf", "/usr/bin/patchelf", "0.19.3"), git=Tool("git", "/usr/bin/git", "2.39.5"))


@dataclass(frozen=True)
class CudaResult:
    record: dict
    warnings: tuple[rules.Finding, ...]

    @property
    def blackwell_regression(self) -> str:
        return self.record["blackwell_regression"]

    @property
    def note(self) -> str | None:
        return self.warnings[0].means if self.warnings else None

    def as_manifest(self) -> dict:
        return self.record


def check_cuda_unit(toolkit: CudaToolkit | None, archs, *, accept_regression: bool, patched_fattn: bool,
                    where: str, constraint: str | None = None) -> CudaResult:
    """Refuses (AssembleError) as `build` would, else what the manifest records: the recipe and the
    command line resolved (config.options), then the rules' context made as the pipeline makes it."""
    recipe = dataclasses.replace(load_recipe("cuda"), cuda=CudaSettings(
        architectures=tuple(CudaArch.parse(str(a)) for a in archs), toolkit=constraint))
    config = resolve(recipe, CliOptions(accept_blackwell_regression=accept_regression), env={})
    ctx = rules.context(config, config.units[0], Toolchain(HOST, cuda=toolkit, **_TOOLS),
                        None if patched_fattn else "not asked for", Distro(""))
    warnings = rules.enforce(ctx, where)
    return CudaResult(rules.cuda_record(ctx), warnings)


def check_hip_unit(rocm: RocmInstall | None, targets, *, multi_arch_risk: str | None, where: str,
                   rocm_path: str | None = None, rocm_origin: str = "--rocm-path") -> dict:
    """Refuses (AssembleError) as `build` would, else the manifest's hip_policy record. rocm_origin:
    where the place came from, the command line or one of the variables (ROCM_PATH, HIP_PATH)."""
    recipe = dataclasses.replace(load_recipe("rocm"), hip=HipSettings(
        targets=tuple(GfxTarget.parse(str(t), where) for t in targets), multi_arch_risk=multi_arch_risk))
    by_cli = rocm_origin == "--rocm-path"
    config = resolve(recipe, CliOptions(rocm_path=rocm_path if by_cli else None),
                     env={} if by_cli or rocm_path is None else {rocm_origin: rocm_path})
    ctx = rules.context(config, config.units[0], Toolchain(HOST, rocm=rocm, **_TOOLS), "not asked for", Distro(""))
    return rules.hip_record(ctx, rules.enforce(ctx, where))
