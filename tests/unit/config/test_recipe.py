"""Recipe loading: every shipped recipe is valid; every bad one gets one clear line and exit 2."""

from __future__ import annotations

import pytest

from builder.errors import AssembleError
from builder.config.recipe import all_recipes, load_recipe, parse_recipe
from builder.config.targets import CudaArch
from tests.support.common import GOOD_RECIPE, REPO, assemble, one_error_line

GOOD = GOOD_RECIPE


def test_shipped_recipes_load():
    names = {r.name for r in all_recipes()}
    assert {"cpu", "vulkan", "cuda", "cuda-vulkan", "rocm", "rocm-cuda"} <= names
    assert load_recipe("vulkan-cuda").name == "cuda-vulkan"  # alias
    for r in all_recipes():
        assert len(r.pin.sha) == 40 and "cpu" in r.backends
        if r.hip:
            assert len(r.hip.targets) == 1


def test_good_recipe_parses(tmp_path):
    r = parse_recipe(tmp_path / "t.toml", GOOD)
    assert r.backends == ("cuda", "vulkan", "cpu")
    assert r.cuda.architectures == (CudaArch(90),)
    assert r.units[0].backends == r.backends


BAD = {
    "unknown key": (GOOD + 'colour = "red"\n', "colour", "unknown key"),
    "wrong type": (GOOD.replace('description = "test"', "description = 5"), "description", "expected a string"),
    "short sha": (GOOD.replace("0c1e57098bba43ac29e6e3b677cdceebdd22334f", "0c1e570"), "pin.sha", "40-hex"),
    "unknown backend": (GOOD.replace('["cuda", "vulkan"]', '["cuda", "metalx"]'), "backends", "unknown backend"),
    "rocm as backend": (GOOD.replace('["cuda", "vulkan"]', '["rocm"]'), "backends", "'hip'"),
    "two hip targets": (GOOD.replace('["cuda", "vulkan"]', '["hip"]') + '[hip]\ntargets = ["gfx1100", "gfx1101"]\n',
                        "hip.targets", "2 gfx targets"),
    "no hip target": (GOOD.replace('["cuda", "vulkan"]', '["hip"]'), "hip.targets", "exactly one"),
    "bad gfx": (GOOD.replace('["cuda", "vulkan"]', '["hip"]') + '[hip]\ntargets = ["1100"]\n', "hip.targets", "gfx"),
    "native cuda arch": (GOOD.replace('["90"]', '["native"]'), "cuda.architectures", "never \"native\""),
    "no cuda arch": (GOOD.replace('architectures = ["90"]', 'architectures = []'), "cuda.architectures", "no card"),
    "no mirrors": (GOOD.split("[[pin.mirrors]]")[0] + '[cuda]\narchitectures = ["90"]\n', "pin.mirrors", "no source mirror"),
    "bad mirror kind": (GOOD.replace('kind = "git"', 'kind = "ftp"'), "pin.mirrors[0].kind", "unknown mirror kind"),
    "sdist without sha256": (GOOD.replace('kind = "git"\nurl = "https://example.invalid/llama.cpp.git"',
                             'kind = "sdist"\npackage = "x"\nversion = "1"\nsubdir = "v"'), "sha256", "needs 'sha256'"),
    "missing name": (GOOD.replace('name = "t"\n', ''), "name", "missing required key"),
    "bad toml": (GOOD + "[[[", "t.toml", "not valid TOML"),
    "unit backend not in recipe": (GOOD + '[[units]]\nname = "a"\nbackends = ["hip"]\n', "units[0].backends", "not among"),
    "backend without unit": (GOOD + '[[units]]\nname = "a"\nbackends = ["cuda"]\n', "units", "no unit builds vulkan"),
    "patch opt-out without reason": (GOOD + '[patches]\ndisable = { "x" = "" }\n', "patches.disable.x", "reason"),
    "bad define name": (GOOD + '[cmake.defines]\n"A B" = "1"\n', "cmake.defines", "CMake variable"),
    "licence text missing": (GOOD + '[bundle.licenses]\n"libfoo.so.*" = "NO-SUCH-LICENSE"\n',
                             "bundle.licenses.libfoo.so.*", "NO-SUCH-LICENSE is not a file"),
    "sdist subdir climbs out": (GOOD.replace('kind = "git"\nurl = "https://example.invalid/llama.cpp.git"',
                                'kind = "sdist"\npackage = "x"\nversion = "1"\nsha256 = "' + "a" * 64 +
                                '"\nsubdir = "vendor/../../etc"'), "pin.mirrors[0].subdir", "without '..'"),
    "sdist subdir absolute": (GOOD.replace('kind = "git"\nurl = "https://example.invalid/llama.cpp.git"',
                              'kind = "sdist"\npackage = "x"\nversion = "1"\nsha256 = "' + "a" * 64 +
                              '"\nsubdir = "/vendor/llama.cpp"'), "pin.mirrors[0].subdir", "a relative folder"),
    "sdist subdir with a space": (GOOD.replace('kind = "git"\nurl = "https://example.invalid/llama.cpp.git"',
                                  'kind = "sdist"\npackage = "x"\nversion = "1"\nsha256 = "' + "a" * 64 +
                                  '"\nsubdir = "vendor /llama.cpp"'), "pin.mirrors[0].subdir", "a relative folder"),
    "licence text empty": (GOOD + '[bundle.licenses]\n"libfoo.so.*" = ""\n', "bundle.licenses.libfoo.so.*",
                           "needs the path of the library's licence text"),
}


def test_a_recipe_states_a_librarys_licence_text_beside_it(tmp_path):
    (tmp_path / "licences").mkdir()
    (tmp_path / "licences" / "FOO-LICENSE").write_text("Foo licence\n")
    r = parse_recipe(tmp_path / "t.toml", GOOD + '[bundle.licenses]\n"libfoo.so.*" = "licences/FOO-LICENSE"\n')
    assert r.bundle_licenses == (("libfoo.so.*", str(tmp_path / "licences" / "FOO-LICENSE")),)


@pytest.mark.parametrize("how", ["absolute", "dot-dot", "home", "symlink"])
def test_a_licence_text_outside_the_recipes_folder_is_refused(tmp_path, monkeypatch, how):
    """The text is copied verbatim into a public release: a shared recipe must not pull in ~/.git-credentials."""
    secret = tmp_path / "home" / ".git-credentials"
    secret.parent.mkdir()
    secret.write_text("https://user:token@example.invalid\n")
    monkeypatch.setenv("HOME", str(secret.parent))
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "LICENSE.link").symlink_to(secret)
    text = {"absolute": str(secret), "dot-dot": "../home/.git-credentials", "home": "~/.git-credentials",
            "symlink": "LICENSE.link"}[how]
    path = folder / "t.toml"
    path.write_text(GOOD + f'[bundle.licenses]\n"libfoo.so.*" = "{text}"\n')
    with pytest.raises(AssembleError) as err:
        parse_recipe(path)
    line = err.value.line()
    assert "bundle.licenses.libfoo.so.*" in line and "\n" not in line, line
    assert ("outside the recipe's folder" if how != "home" else "is not a file") in line, line
    assert "put the licence text beside the recipe" in line or how == "home", line


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_recipe_one_clear_line(tmp_path, case):
    text, key, message = BAD[case]
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(AssembleError) as err:
        parse_recipe(path)
    line = err.value.line()
    assert str(path) in line and key in line and message in line, line
    assert "fix:" in line and "\n" not in line


def test_bad_recipe_cli_exit_code(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BAD["two hip targets"][0])
    one_error_line(assemble("show", str(path)), 2, ["hip.targets"])


def test_unknown_recipe_name():
    proc = assemble("show", "no-such-recipe")
    assert proc.returncode == 2 and "unknown recipe 'no-such-recipe'" in proc.stderr and "cpu" in proc.stderr


def test_hostile_recipe_files_are_one_line(tmp_path):
    """A byte-order mark is an editor's, not the recipe's; deep nesting and a folder are refused in
    one line; an unknown feature is refused by `show` and `build` alike, before any fetch."""
    good = (REPO / "recipes" / "cpu.toml").read_text()
    bom = tmp_path / "bom.toml"
    bom.write_text("\ufeff" + good, encoding="utf-8")
    assert parse_recipe(bom).name == "cpu"
    deep = tmp_path / "deep.toml"
    deep.write_text(good + "\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    feature = tmp_path / "feature.toml"
    feature.write_text(good.replace('"backend-dl"]', '"backend-dl", "no-such-feature"]'))
    cases = [(["show", str(deep)], "nested too deeply"), (["show", str(tmp_path)], "is a folder, not a recipe file"),
             (["show", str(feature)], "pin.features: unknown feature 'no-such-feature'"),
             (["build", "--recipe", str(feature), "--out", str(tmp_path / "rt")],
              "pin.features: unknown feature 'no-such-feature'")]
    for argv, words in cases:
        one_error_line(assemble(*argv, env={"ASSEMBLE_CACHE": str(tmp_path / "cache")}), 2, [words])
    assert not (tmp_path / "cache").exists() and not (tmp_path / "rt").exists()     # nothing fetched or written
