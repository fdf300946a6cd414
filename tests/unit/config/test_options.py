"""The one cascade: defaults -> recipe -> environment -> command line, each value with its origin."""

from __future__ import annotations

import dataclasses
import os

import pytest

from builder.config.options import ADOPTED, CONTAINER, HOST, CliOptions, resolve, resolve_places
from builder.config.recipe import load_recipe, parse_recipe
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError


def test_defaults_then_recipe_then_environment_then_command_line(tmp_path):
    recipe = load_recipe("cuda")
    c = resolve(recipe, env={})
    assert (c.jobs.value, c.jobs.origin) == (os.cpu_count(), "default")
    assert (c.places.cuda_root.value, c.places.cuda_root.origin) == (None, "default")
    assert [str(a) for a in c.units[0].cuda_archs] == [str(a) for a in recipe.cuda.architectures]   # the recipe's
    env = {"CMAKE_BUILD_PARALLEL_LEVEL": "3", "CUDA_HOME": "/opt/home-cuda", "CUDAToolkit_ROOT": "/opt/tk",
           "ASSEMBLE_CONTAINER_ENGINE": "podman", "CC": "clang", "ROCM_PATH": "/opt/rocm-x"}
    c = resolve(recipe, env=env)
    assert (c.jobs.value, c.jobs.origin) == (3, "CMAKE_BUILD_PARALLEL_LEVEL")
    assert (c.places.cuda_root.value, c.places.cuda_root.origin) == ("/opt/tk", "CUDAToolkit_ROOT")   # first of the variables
    assert (c.engine.value, c.places.cc.value, c.places.rocm_path.value) == ("podman", "clang", "/opt/rocm-x")
    cli = CliOptions(jobs=5, cuda_root="/x", cuda_archs=(CudaArch(90),), engine="docker", rocm_path="/r")
    c = resolve(recipe, cli, env=env)
    assert (c.jobs.value, c.jobs.origin, c.places.cuda_root.origin, c.engine.value) == (5, "--jobs", "--cuda-root", "docker")
    assert c.units[0].cuda_archs == (CudaArch(90),) and c.units[0].value("CMAKE_CUDA_ARCHITECTURES") == "90"
    assert resolve_places(cli, env).rocm_path.value == "/r"


def test_defines_cascade_and_owned_keys(tmp_path):
    text = load_recipe("cpu").path.read_text() + '\n[cmake.defines]\nGGML_OPENMP = "OFF"\nLLAMA_OPENSSL = "OFF"\n'
    recipe = parse_recipe(tmp_path / "r.toml", text)
    u = resolve(recipe, CliOptions(defines=(("GGML_OPENMP", "ON"),)), env={}).units[0]
    origin = {d.key: d.origin for d in u.defines}
    assert u.value("GGML_OPENMP") == "ON" and origin["GGML_OPENMP"] == "--define"      # the command line wins
    assert u.value("LLAMA_OPENSSL") == "OFF" and origin["LLAMA_OPENSSL"] == "recipe"   # over the default
    assert u.value("GGML_NATIVE") == "OFF" and origin["GGML_NATIVE"] == "default"
    assert [d.key for d in u.defines].count("LLAMA_OPENSSL") == 1
    for key in ("CMAKE_CUDA_ARCHITECTURES", "GPU_TARGETS", "GGML_VULKAN"):
        with pytest.raises(AssembleError) as err:
            resolve(recipe, CliOptions(defines=((key, "x"),)), env={})
        assert err.value.where == "--define" and "set by assemble from one place" in err.value.what
    bad = parse_recipe(tmp_path / "b.toml", load_recipe("cpu").path.read_text() + '\n[cmake.defines]\nGGML_CUDA = "ON"\n')
    with pytest.raises(AssembleError) as err:
        resolve(bad, env={})
    assert "cmake.defines" in err.value.where and "backends" in err.value.fix


def test_where_each_unit_builds():
    c = resolve(load_recipe("rocm-cuda128"), env={})
    assert [(u.name, u.where.kind, u.where.image) for u in c.units] == [("hip", HOST, None),
                                                                       ("cuda", CONTAINER, "cuda12.8-build")]
    c = resolve(load_recipe("rocm-cuda-units"), CliOptions(unit_from=(("cuda", "/srv/u"),)), env={})
    assert c.unit("cuda").where.kind == ADOPTED and c.unit("cuda").where.folder == "/srv/u"
    assert c.split() and not resolve(load_recipe("rocm-cuda128"), env={}).split()
    with pytest.raises(AssembleError, match="has no unit 'nope'"):
        resolve(load_recipe("rocm-cuda-units"), CliOptions(only_unit="nope"), env={})
    with pytest.raises(AssembleError, match="both to be built"):
        resolve(load_recipe("rocm-cuda-units"), CliOptions(only_unit="cuda", unit_from=(("cuda", "/x"),)), env={})


def test_hip_target_replaces_the_recipes_and_reaches_every_define():
    u = resolve(load_recipe("rocm"), CliOptions(hip_target=GfxTarget.parse("gfx90a:xnack-")), env={}).units[0]
    assert u.hip_targets == (GfxTarget("gfx90a", ("xnack-",)),)
    assert u.value("GPU_TARGETS") == u.value("AMDGPU_TARGETS") == "gfx90a:xnack-"


def test_a_bad_environment_value_is_one_line():
    with pytest.raises(AssembleError) as err:
        resolve(load_recipe("cpu"), env={"CMAKE_BUILD_PARALLEL_LEVEL": "lots"})
    assert err.value.where == "CMAKE_BUILD_PARALLEL_LEVEL" and "\n" not in err.value.line()


def test_the_resolved_configuration_is_frozen_and_recorded_whole():
    c = resolve(load_recipe("cuda-vulkan"), env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.jobs = None
    d = c.as_dict()
    assert d["units"][0]["cuda_archs"] and d["cuda_root"] == {"value": None, "from": "default"}
