"""[tests] backend_ops: the recipe key, its default, and what it does to the plan (one define, one
target, one unit) and to `assemble show`."""

from __future__ import annotations

import json

import pytest

from builder.config.options import CliOptions, resolve
from builder.config.recipe import all_recipes, load_recipe, parse_recipe
from builder.errors import AssembleError
from builder.units.plan import plan_unit
from tests.support.common import GOOD_RECIPE, assemble, one_error_line
from tests.unit.units.test_plan import TOOLS, TREE

CPU_ONLY = GOOD_RECIPE.replace('["cuda", "vulkan"]', '["cpu"]').replace('[cuda]\narchitectures = ["90"]\n', "")


def test_default_on_with_a_gpu_backend_off_for_cpu_only(tmp_path):
    assert parse_recipe(tmp_path / "t.toml", GOOD_RECIPE).tests.backend_ops is True
    assert parse_recipe(tmp_path / "t.toml", CPU_ONLY).tests.backend_ops is False
    for r in all_recipes():          # the shipped recipes follow the rule: only cpu has no GPU backend
        assert r.tests.backend_ops is (r.gpu_backends() != ()), r.name


def test_a_recipe_turns_it_off_or_on(tmp_path):
    off = parse_recipe(tmp_path / "t.toml", GOOD_RECIPE + "[tests]\nbackend_ops = false\n")
    assert off.tests.backend_ops is False and off.backend_ops_unit() is None
    on = parse_recipe(tmp_path / "t.toml", CPU_ONLY + "[tests]\nbackend_ops = true\n")
    assert on.tests.backend_ops is True and on.backend_ops_unit() == "main"


@pytest.mark.parametrize("text,words", [
    (GOOD_RECIPE + '[tests]\nbackend_ops = "yes"\n', ["tests.backend_ops", "true or false"]),
    (GOOD_RECIPE + "[tests]\nall = true\n", ["tests.all", "unknown key", "backend_ops"]),
    (GOOD_RECIPE.replace('description = "test"', 'description = "test"\ntests = "on"'), ["tests", "a table"]),
])
def test_a_bad_tests_table_is_one_line_exit_2(tmp_path, text, words):
    with pytest.raises(AssembleError):
        parse_recipe(tmp_path / "t.toml", text)
    (tmp_path / "t.toml").write_text(text)
    one_error_line(assemble("show", str(tmp_path / "t.toml")), 2, words)


def _plans(recipe, **cli):
    config = resolve(recipe, CliOptions(**cli), env={})
    return {u.name: plan_unit(config, u, TOOLS, TREE, recipe.pin.sha) for u in config.units}


def test_on_the_unit_configures_upstreams_tests_and_builds_only_test_backend_ops(isolated_cache, tmp_path):
    plan = _plans(load_recipe("vulkan"))["main"]
    assert dict(plan.defines)["LLAMA_BUILD_TESTS"] == "ON"
    assert plan.targets == ("llama-server", "llama-cli", "llama-bench", "test-backend-ops")
    assert plan.build[-4:] == ("llama-server", "llama-cli", "llama-bench", "test-backend-ops")
    assert next(d for d in plan.unit.defines if d.key == "LLAMA_BUILD_TESTS").origin == "recipe [tests]"
    off = _plans(parse_recipe(tmp_path / "t.toml", GOOD_RECIPE + "[tests]\nbackend_ops = false\n"))["main"]
    assert dict(off.defines)["LLAMA_BUILD_TESTS"] == "OFF" and "test-backend-ops" not in off.targets
    assert off.key != _plans(parse_recipe(tmp_path / "t.toml", GOOD_RECIPE))["main"].key, "a define: a new build key"
    cpu = _plans(load_recipe("cpu"))["main"]
    assert dict(cpu.defines)["LLAMA_BUILD_TESTS"] == "OFF" and "test-backend-ops" not in cpu.targets


def test_one_unit_of_a_multi_unit_recipe_builds_it(isolated_cache, tmp_path):
    plans = _plans(load_recipe("rocm-cuda-units"))
    built = {name for name, p in plans.items() if "test-backend-ops" in p.targets}
    assert built == {"hip"}, "one unit: the first of those with the most GPU backends"
    assert {name: dict(p.defines)["LLAMA_BUILD_TESTS"] for name, p in plans.items()} == {"hip": "ON", "cuda": "OFF"}
    two = GOOD_RECIPE + ('[[units]]\nname = "host"\nbackends = ["cpu"]\n'
                         '[[units]]\nname = "gpus"\nbackends = ["cuda", "vulkan"]\n')
    assert parse_recipe(tmp_path / "t.toml", two).backend_ops_unit() == "gpus"


def test_the_define_has_one_home(tmp_path):
    (tmp_path / "t.toml").write_text(GOOD_RECIPE + '[cmake.defines]\nLLAMA_BUILD_TESTS = "ON"\n')
    one_error_line(assemble("show", str(tmp_path / "t.toml")), 2, ["LLAMA_BUILD_TESTS", "[tests] backend_ops"])
    one_error_line(assemble("show", "vulkan", "-D", "LLAMA_BUILD_TESTS=OFF"), 2, ["LLAMA_BUILD_TESTS"])


def test_show_says_which_unit_builds_it(isolated_cache):
    out = assemble("show", "vulkan", check=True).stdout
    assert "tests      test-backend-ops (unit main, into the runtime's tests/); [tests] backend_ops = true" in out
    assert "tests      none; [tests] backend_ops = false" in assemble("show", "cpu", check=True).stdout
    shown = json.loads(assemble("show", "rocm-cuda-units", "--json", check=True).stdout)
    assert shown["tests"] == {"test-backend-ops": "hip"}
    assert {u["name"]: u["backend_ops"] for u in shown["config"]["units"]} == {"hip": True, "cuda": False}
