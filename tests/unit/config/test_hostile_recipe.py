"""A hostile recipe string is refused when the recipe is read, in one line, and never emitted.

Every string a recipe can set is checked by its grammar with fullmatch (a `$` anchor lets a trailing
newline through), container names by the OCI name grammar, and no string anywhere carries a control
character; so a release workflow never receives one it would have to escape.
"""

from __future__ import annotations

import json

import pytest

from tests.support.common import SHA, assemble, one_error_line

BASE = {
    "name": '"hostile"', "description": '"test"', "backends": '["cpu"]', "aliases": "[]",
    "targets": '["llama-server"]', "sha": f'"{SHA}"', "url": '"https://example.invalid/llama.cpp.git"',
    "container": None, "defines": "", "enable": "[]", "never": "",
}


def _recipe(**over) -> str:
    v = dict(BASE, **over)
    text = (f'name = {v["name"]}\ndescription = {v["description"]}\nbackends = {v["backends"]}\n'
            f'aliases = {v["aliases"]}\ntargets = {v["targets"]}\n'
            f'[pin]\nsha = {v["sha"]}\n[[pin.mirrors]]\nkind = "git"\nurl = {v["url"]}\n'
            f'[cmake.defines]\n{v["defines"]}\n[patches]\nenable = {v["enable"]}\n[bundle.never]\n{v["never"]}\n')
    if v["container"] is not None:
        text += f'[[units]]\nname = "main"\nbackends = ["cpu"]\ncontainer = {v["container"]}\n'
    return text


def q(s: str) -> str:
    return json.dumps(s)          # a TOML basic string: JSON's escapes (\n, \u001b) are TOML's


HOSTILE = {
    "newline in name": (dict(name=q("evil\n")), ["name", "invalid recipe name"]),
    "command in name": (dict(name=q("x$(id)")), ["name"]),
    "sha with a trailing newline": (dict(sha=q(SHA + "\n")), ["pin.sha", "40-hex"]),
    "command in container": (dict(container=q("x$(id)")), ["units[0].container", "OCI"]),
    "upper-case container": (dict(container=q("Cuda12.8")), ["units[0].container"]),
    "container with a newline": (dict(container=q("cuda12.8-build\n")), ["units[0].container"]),
    "path in container": (dict(container=q("../../etc/x")), ["units[0].container"]),
    "newline in alias": (dict(aliases="[" + q("a\nb") + "]"), ["aliases"]),
    "command in target": (dict(targets=f'[{q("llama-server;id")}]'), ["targets", "CMake target"]),
    "option as mirror url": (dict(url=q("--upload-pack=touch /tmp/x")), ["pin.mirrors[0].url", "git URL"]),
    "newline in mirror url": (dict(url=q("https://example.invalid/x\nid")), ["pin.mirrors[0].url"]),
    "newline in a define": (dict(defines="GGML_NATIVE = " + q("OFF\nid")), ["cmake.defines.GGML_NATIVE",
                                                                              "control character"]),
    "command in patch name": (dict(enable=f'[{q("x;id")}]'), ["patches.enable"]),
    "command in bundle glob": (dict(never=f'{q("lib$(id).so")} = "why"'), ["bundle.never", "glob"]),
    "escape in description": (dict(description=q("red \u001b[31m")), ["description", "control character"]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_recipe_string_refused_at_load(tmp_path, case):
    over, words = HOSTILE[case]
    path = tmp_path / "hostile.toml"
    path.write_text(_recipe(**over))
    proc = assemble("matrix", "--emit", "github-actions", "--recipe", str(path), cwd=tmp_path)
    one_error_line(proc, 2, [str(path), *words])
    assert proc.stdout == ""            # never emitted, not even in part


def test_the_base_recipe_is_accepted(tmp_path):
    """The table's recipe is good but for the one string each case changes (the refusals are theirs)."""
    path = tmp_path / "ok.toml"
    path.write_text(_recipe(container=q("cuda12.8-build"), description=q("two\nlines\tof text")))
    proc = assemble("show", str(path), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
