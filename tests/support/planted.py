"""A planted ggml backend module, for proving the loader does not pick up strangers' code.

The module itself is the verifier's (builder.devices.build_plant): named
libggml-cpu-*.so, exporting a ggml_backend_score above any real CPU variant, with a
constructor that writes the marker file at dlopen() time, so the marker exists if and
only if something loaded it. Tests need a C compiler, which CI has.
"""

from __future__ import annotations

from pathlib import Path

from builder.check.dynamic import PLANT_NAME, build_plant


def build_planted_module(dest_dir: Path, marker: Path, name: str = PLANT_NAME) -> Path:
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    plant = build_plant(dest_dir, Path(marker))
    assert plant is not None, "no C compiler to build the planted module"
    if name != plant.name:
        plant = plant.rename(dest_dir / name)
    return plant
