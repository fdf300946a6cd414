"""The toolchain of every unit of a build, found once: host units from one probe of this host,
container units from their image, units built elsewhere from what their folder records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from builder.config.options import ADOPTED, CONTAINER, HOST, BuildConfig, UnitConfig
from builder.toolchain import container
from builder.toolchain.detect import CudaToolkit, Tool, Toolchain, host_toolchain
from builder.toolchain.container import Engine


def host(config: BuildConfig, units: tuple[UnitConfig, ...], for_rules: bool = True) -> Toolchain:
    """One probe of this host for everything these units need here. A unit built elsewhere still
    needs this host's ROCm: its libraries and kernel data get bundled. for_rules=False (a plan
    only): no glslc feature probes."""
    backends = {b for u in units if u.where.kind == HOST for b in u.backends}
    backends |= {"hip"} & {b for u in units if u.where.kind == ADOPTED for b in u.backends}
    places = config.places
    return host_toolchain(backends, cc=places.cc.value, cxx=places.cxx.value, launcher_choice=config.launcher.value,
                          cuda_root=places.cuda_root.value, rocm_path=places.rocm_path.value, glslc=for_rules)


def image(config: BuildConfig, unit: UnitConfig, engine: Engine | None, probe: bool = True) -> Toolchain:
    """A container unit's toolchain: the image's own tools; its CUDA toolkit read from the image
    (building the image when the engine lacks it) when `probe`, else unknown (`show`)."""
    cuda = None
    if probe and engine is not None and "cuda" in unit.backends:
        tag = container.ensure_image(engine, unit.where.image_name())
        cuda = container.probe_cuda(engine, tag)
    def image_tool(name: str) -> Tool:
        return Tool(name, name, f"image {unit.where.image}")

    return Toolchain(CONTAINER, cmake=image_tool("cmake"), ninja=image_tool("ninja"), launcher_choice=config.launcher.value,
                     launcher=image_tool("ccache") if config.launcher.value != "none" else None, cuda=cuda)


def adopted(unit_host: Toolchain, recorded_cuda: CudaToolkit | None) -> Toolchain:
    return Toolchain(ADOPTED, cuda=recorded_cuda, rocm=unit_host.rocm)


class Recorded(Protocol):
    """What a folder built elsewhere tells of its toolchain (builder.units.unitfolder.UnitDescription)."""
    def cuda_toolkit(self) -> CudaToolkit | None: ...


def for_units(config: BuildConfig, units: tuple[UnitConfig, ...], recorded: Mapping[str, Recorded] = {},
              engine: Engine | None = None, probe_images: bool = True) -> dict[str, Toolchain]:
    """unit name -> its Toolchain. recorded: unit name -> its UnitDescription (built elsewhere).
    probe_images=False (`show`): nothing is built or written, images and shader compilers unasked."""
    here = host(config, units, for_rules=probe_images)
    out = {}
    for unit in units:
        if unit.where.kind == ADOPTED:
            out[unit.name] = adopted(here, recorded[unit.name].cuda_toolkit())
        elif unit.where.kind == CONTAINER:
            out[unit.name] = image(config, unit, engine, probe_images)
        else:
            out[unit.name] = here
    return out
