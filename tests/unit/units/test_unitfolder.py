"""Units built elsewhere: --only-unit builds one unit of a multi-unit recipe and describes it;
--unit-from merges such a folder instead of compiling, and refuses one that does not belong.

The real round trip builds the Vulkan unit of tests/data/vulkan-units.toml alone, carries
its bin/ and assemble-unit.json to another folder, merges it over a separately built CPU
base, and serves a request through the carried module on Mesa's lavapipe.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.units import unitfolder
from builder.errors import AssembleError
from builder.config.options import resolve
from builder.config.recipe import load_recipe
from tests.support.common import REPO, SHA, assemble

RECIPE = REPO / "tests" / "data" / "vulkan-units.toml"
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}
TREE = "backend-loader-no-cwd:dc3ae380d808"


def _unit_folder(path: Path, **changes) -> Path:
    """A folder shaped like --only-unit's output, with its description changed as asked."""
    desc = {"format": unitfolder.FORMAT, "recipe": "vulkan-units", "unit": "vulkan", "backends": ["vulkan"],
            "sha": SHA, "tree": TREE, "defines": {"GGML_BACKEND_DL": "ON", "BUILD_SHARED_LIBS": "ON", "GGML_VULKAN": "ON"},
            "targets": ["llama-server"], "cmake": "cmake", "source_dir": "/src", "build_dir": "/b", "jobs": 2,
            "env": {}, "toolchain": {}, "key": "k", "container": None, "built_on": {"libc": "glibc 2.36"}}
    desc.update(changes)
    (path / "bin").mkdir(parents=True)
    (path / unitfolder.UNIT_FILE).write_text(json.dumps(desc))
    return path


def _adopt(folder: Path, unit: str = "vulkan", sha: str = SHA, tree: str = TREE):
    config = resolve(load_recipe(str(RECIPE)))
    desc = unitfolder.read(folder, config.recipe, unit)
    unitfolder.check_belongs(desc, config.recipe, config.unit(unit), sha, tree)
    return unitfolder.adopt(desc, config, config.unit(unit))


def test_a_matching_folder_is_adopted_with_its_recorded_plan(tmp_path):
    plan = _adopt(_unit_folder(tmp_path / "u"))
    assert plan.build_dir == (tmp_path / "u").resolve()
    assert dict(plan.defines)["GGML_VULKAN"] == "ON" and plan.targets == ("llama-server",)
    assert plan.source_dir == Path("/src") and plan.tree == TREE
    assert plan.configure[:3] == ("cmake", "-S", "/src") and plan.build[3:5] == ("-j", "2")
    old = _unit_folder(tmp_path / "old", format=1)       # a folder an older assemble wrote: rebuild it
    with pytest.raises(AssembleError, match="format 1"):
        _adopt(old)


def test_a_unit_taken_from_a_folder_is_not_asked_for_the_remote_cache(tmp_path):
    """A merge job with ASSEMBLE_REMOTE_CACHE set (the generated workflow sets it on every build) compiles
    nothing for the adopted unit, so that unit's missing launcher must not refuse the build."""
    from builder.flows import build as build_flow
    from builder.config.options import ADOPTED, CliOptions
    from builder.toolchain.detect import Toolchain
    plan = _adopt(_unit_folder(tmp_path / "u"))
    assert plan.launcher is None
    config = resolve(load_recipe(str(RECIPE)), CliOptions(remote_cache="redis://cache:6379"), env={})
    toolchains = {"vulkan": Toolchain(ADOPTED)}
    build_flow._check_remote_cache(config, [plan], toolchains, adopted={"vulkan"})
    with pytest.raises(AssembleError, match="needs a compiler launcher"):
        build_flow._check_remote_cache(config, [plan], toolchains, adopted=set())


@pytest.mark.parametrize("changes, unit, words", [
    ({"sha": "4df29be4f4c3673f428170fda944a5b19f743bb8"}, "vulkan", "built at 4df29be4f4c3"),
    ({"tree": ""}, "vulkan", "patched with [nothing]"),
    ({}, "base", "it is unit 'vulkan'"),
    ({"backends": ["vulkan", "cuda"]}, "vulkan", "backends vulkan, cuda"),
    ({"recipe": "cuda-vulkan"}, "vulkan", "of recipe 'cuda-vulkan'"),
])
def test_a_folder_that_does_not_belong_is_refused_in_one_line(tmp_path, changes, unit, words):
    folder = _unit_folder(tmp_path / "u", **changes)
    with pytest.raises(AssembleError) as err:
        _adopt(folder, unit=unit)
    line = err.value.line()
    assert "does not belong in this build" in line and words in line and "--only-unit" in line
    assert "\n" not in line


@pytest.mark.parametrize("content, words", [
    (None, "no assemble-unit.json"),
    ("{not json", "unreadable"),
    (json.dumps({"format": 99}), "format 99"),
    (json.dumps([1, 2]), "format ?"),
])
def test_what_is_not_a_unit_folder_is_refused(tmp_path, content, words):
    folder = tmp_path / "u"
    folder.mkdir()
    if content is not None:
        (folder / unitfolder.UNIT_FILE).write_text(content)
    with pytest.raises(AssembleError) as err:
        _adopt(folder)
    assert words in err.value.line()


def test_unit_specs_are_name_equals_dir_once_each():
    assert unitfolder.parse_specs(["cuda=/a=b", "hip=/x"]) == (("cuda", "/a=b"), ("hip", "/x"))
    for bad in (["cuda"], ["=dir"], ["cuda=/a", "cuda=/b"]):
        with pytest.raises(AssembleError):
            unitfolder.parse_specs(bad)


def test_cli_refusals_come_before_any_work(tmp_path):
    (tmp_path / "unit").mkdir()
    cases = [
        (["--only-unit", "nope"], "has no unit 'nope'"),
        (["--unit-from", f"nope={tmp_path}"], "has no unit 'nope'"),
        (["--unit-from", f"vulkan={tmp_path / 'missing'}"], "no such folder"),
        (["--only-unit", "vulkan", "--unit-from", f"vulkan={tmp_path}"], "both to be built"),
        (["--only-unit", "vulkan", "--out", str(tmp_path)], "--out is the working directory"),
        (["--unit-from", f"vulkan={tmp_path / 'unit'}"], "no assemble-unit.json"),
        (["--unit-from", f"vulkan={tmp_path}"], "--out is inside the --unit-from folder of vulkan"),   # ./runtime-*
        (["--lib-path", str(tmp_path / "nope")], "--lib-path"),
    ]
    for extra, words in cases:
        proc = assemble("build", "--recipe", str(RECIPE), *extra, cwd=tmp_path, env={"ASSEMBLE_CACHE": str(tmp_path / "c")})
        assert proc.returncode == 2, (extra, proc.stderr)
        assert words in proc.stderr and "Traceback" not in proc.stderr, (extra, proc.stderr)
    assert not list(tmp_path.glob("runtime-*")) and not (tmp_path / "rt").exists()
