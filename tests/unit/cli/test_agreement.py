"""`show`, `build`, `doctor` and `matrix` resolve every recipe to the same configuration.

Each command reaches builder.config.options.resolve by its own path (its own parser, its own
options); this compares what they resolved, value by value, for every shipped recipe."""

from __future__ import annotations

import json

import pytest

from builder.check import doctor
from builder.cli import main as cli
from builder.cli.commands import build as build_command
from builder.config.recipe import all_recipes

RECIPES = [r.name for r in all_recipes()]


@pytest.fixture(scope="module")
def facts():
    return doctor.gather(timeout=5)     # this host, probed once for every recipe's doctor run


def _json(capsys, *argv: str):
    assert cli.main(list(argv)) in (0, 1), argv     # doctor says 1 for a recipe this host cannot build
    return json.loads(capsys.readouterr().out)


def _units(config: dict) -> dict:
    """What a matrix entry states of each unit: where it builds, for which GPU targets."""
    return {u["name"]: {k: u[k] for k in ("backends", "where", "cuda_archs", "hip_targets")} for u in config["units"]}


@pytest.mark.parametrize("recipe", RECIPES)
def test_show_build_and_doctor_resolve_the_same_configuration(recipe, capsys, monkeypatch, facts):
    shown = _json(capsys, "show", recipe, "--json")["config"]
    built = build_command.config_of(cli.parser().parse_args(["build", "--recipe", recipe])).as_dict()
    monkeypatch.setattr(doctor, "gather", lambda **kw: facts)
    diagnosed = _json(capsys, "doctor", "--recipe", recipe, "--json")["config"]
    assert shown == built == diagnosed
    assert shown["recipe"] == recipe and shown["units"], shown


@pytest.mark.parametrize("recipe", RECIPES)
def test_matrix_states_what_build_resolves_for_each_job(recipe, capsys):
    for entry in _json(capsys, "matrix", "--recipe", recipe, "--format", "json"):
        args = entry["args"].split()
        built = build_command.config_of(cli.parser().parse_args(["build", *args])).as_dict()
        jobs_units = {u["name"] for u in entry["units"]}
        assert jobs_units and {n: u for n, u in _units(built).items() if n in jobs_units} == _units(
            {"units": entry["units"]}), entry["name"]
        hip = [t for u in entry["units"] for t in u["hip_targets"]]
        assert entry["gpu_arch"] in ("none", "spirv", ",".join(hip)) or entry["gpu_arch"].startswith("sm_"), entry
        cuda = [a for u in entry["units"] for a in u["cuda_archs"]]
        if entry["gpu_arch"].startswith("sm_"):
            assert entry["gpu_arch"] == ",".join(f"sm_{a}" for a in cuda), entry


def test_a_changed_option_changes_every_view_alike(capsys, monkeypatch, facts):
    """The same override reaches every command's configuration (here the CUDA toolkit place)."""
    monkeypatch.setenv("CUDAToolkit_ROOT", "/opt/cuda-from-env")
    shown = _json(capsys, "show", "cuda", "--json")["config"]
    monkeypatch.setattr(doctor, "gather", lambda **kw: facts)
    diagnosed = _json(capsys, "doctor", "--recipe", "cuda", "--json")["config"]
    built = build_command.config_of(cli.parser().parse_args(["build", "--recipe", "cuda"])).as_dict()
    assert shown["cuda_root"] == diagnosed["cuda_root"] == built["cuda_root"] == {"value": "/opt/cuda-from-env",
                                                                                   "from": "CUDAToolkit_ROOT"}
    over = build_command.config_of(cli.parser().parse_args(["build", "--recipe", "cuda", "--cuda-root", "/x"]))
    assert over.places.cuda_root.value == "/x" and over.places.cuda_root.origin == "--cuda-root"
