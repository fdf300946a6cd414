"""Judge a toolkit by the build's own rules (builder.toolchain.rules), the way the pipeline does for
one unit: the tests of the CUDA and ROCm rules speak through these two calls."""

from __future__ import annotations

from dataclasses import dataclass

from builder.config.options import HOST, UnitConfig, Where
from builder.config.recipe import CudaSettings, HipSettings, load_recipe
from builder.config.targets import CudaArch, GfxTarget
from builder.toolchain import rules
from builder.toolchain.detect import CudaToolkit, RocmInstall, Tool, Toolchain

_TOOLS = dict(cmake=Tool("cmake", "/usr/bin/cmake", "3.31.6"), ninja=Tool("ninja", "/usr/bin/ninja", "1.12.1"),
              cc=Tool("cc", "/usr/bin/cc", "gcc 12"), cxx=Tool("c++", "/usr/bin/c++", "g++ 12"),
              patchelf=Tool("patchelf", "/usr/bin/patchelf", "0.19.3"))


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
    """Refuses (AssembleError) as `build` would, else what the manifest records."""
    recipe = load_recipe("cuda")
    recipe = recipe.__class__(**{**recipe.__dict__, "cuda": CudaSettings(toolkit=constraint)})
    unit = UnitConfig("main", ("cuda", "cpu"), Where(HOST), cuda_archs=tuple(CudaArch.parse(str(a)) for a in archs))
    ctx = rules.Context(unit, Toolchain(HOST, cuda=toolkit, **_TOOLS), recipe, accept_regression=accept_regression,
                        blackwell_patch=None if patched_fattn else "not asked for")
    warnings = rules.enforce(ctx, where)
    return CudaResult(rules.cuda_record(ctx), warnings)


def check_hip_unit(rocm: RocmInstall | None, targets, *, multi_arch_risk: str | None, where: str,
                   rocm_path: str | None = None, rocm_origin: str = "--rocm-path") -> dict:
    """Refuses (AssembleError) as `build` would, else the manifest's hip_policy record."""
    recipe = load_recipe("rocm")
    recipe = recipe.__class__(**{**recipe.__dict__, "hip": HipSettings(multi_arch_risk=multi_arch_risk)})
    unit = UnitConfig("main", ("hip", "cpu"), Where(HOST),
                      hip_targets=tuple(GfxTarget.parse(str(t), where) for t in targets))
    ctx = rules.Context(unit, Toolchain(HOST, rocm=rocm, **_TOOLS), recipe, rocm_path=rocm_path, rocm_origin=rocm_origin)
    return rules.hip_record(ctx, rules.enforce(ctx, where))
