"""A catalogue of malformed inputs: recipes, patch metadata, command-line arguments and source
trees. Each must give exactly one clear line (what, where, how to fix), the right exit
status, and never a traceback. Cases run in-process through cli.main (the same rendering
the console script uses); a sample also runs as a real subprocess."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from builder.cli import main as cli
from builder.errors import AssembleError
from builder.source.patches import load_patch
from tests.support.common import GOOD_RECIPE, SHA, assemble

GOOD = GOOD_RECIPE
HIP = GOOD.replace('["cuda", "vulkan"]', '["hip"]').replace('[cuda]\narchitectures = ["90"]\n', "")

# name: (recipe text, key words the line must hold)
RECIPES = {
    "not toml": (GOOD + "[[[", ["not valid TOML", "line"]),
    "unknown key": (GOOD + 'colour = "red"\n', ["unknown key 'colour'", "known keys"]),
    "wrong type": (GOOD.replace('description = "test"', "description = 5"), ["description", "expected a string"]),
    "short sha": (GOOD.replace(SHA, SHA[:7]), ["pin.sha", "40-hex", "assemble pin"]),
    "rocm as backend": (GOOD.replace('["cuda", "vulkan"]', '["rocm"]'), ["unknown backend 'rocm'", "'hip'"]),
    "backend twice": (GOOD.replace('["cuda", "vulkan"]', '["cuda", "cuda"]'), ["listed twice"]),
    "two gfx targets": (HIP + '[hip]\ntargets = ["gfx1100", "gfx1030"]\n', ["hip.targets", "2 gfx targets",
                                                                             "multi_arch_risk"]),
    "native cuda arch": (GOOD.replace('["90"]', '["native"]'), ["cuda.architectures", "native"]),
    "no mirror": (GOOD.split("[[pin.mirrors]]")[0] + '[cuda]\narchitectures = ["90"]\n', ["pin.mirrors", "no source mirror"]),
    "ftp mirror": (GOOD.replace('kind = "git"', 'kind = "ftp"'), ["pin.mirrors[0].kind", "unknown mirror kind"]),
    "sdist bad sha256": (GOOD.replace('kind = "git"\nurl = "https://example.invalid/llama.cpp.git"',
                                      'kind = "sdist"\npackage = "p"\nversion = "1"\nsubdir = "v"\nsha256 = "abc"'),
                         ["pin.mirrors[0].sha256", "64-hex"]),
    "unit backend not in recipe": (GOOD + '[[units]]\nname = "a"\nbackends = ["hip"]\n', ["units[0].backends", "not among"]),
    "two units one name": (GOOD + '[[units]]\nname = "a"\nbackends = ["cuda"]\n[[units]]\nname = "a"\n'
                                  'backends = ["vulkan"]\n', ["units", "share a name"]),
    "bad cmake variable": (GOOD + '[cmake.defines]\n"GGML-CUDA" = "ON"\n', ["cmake.defines.GGML-CUDA", "CMake variable"]),
    "disable without reason": (GOOD + '[patches.disable]\nbackend-loader-no-cwd = ""\n', ["patches.disable", "reason"]),
    "bad cpu variants": (GOOD + '[cpu]\nvariants = "most"\n', ["cpu.variants", "unknown value"]),
    "key with a newline": (GOOD + '"two\\nlines" = 1\n', ["unknown key 'two\\nlines'"]),
}


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """cli.main as the console script runs it: (exit status, stdout, stderr)."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse exits by itself
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str, want_code: int, words: list[str]) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == want_code, err
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    assert lines[0].startswith("error: ")
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"


@pytest.mark.parametrize("case", sorted(RECIPES))
def test_malformed_recipe(case, tmp_path, capsys):
    text, words = RECIPES[case]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    code, out, err = run_cli(["show", str(path), "--json"], capsys)
    assert_one_line(code, err, 2, [str(path), "fix:", *words])
    refusal = json.loads(out)["error"]           # --json: the same refusal as an object, nothing else
    assert refusal["exit"] == 2 and str(path) in refusal["where"] and refusal["fix"]
    assert refusal["fix"] in err                  # the words of the line, unescaped


def test_recipe_file_not_utf8(tmp_path, capsys):
    path = tmp_path / "bin.toml"
    path.write_bytes(b"name = \"\xff\xfe\"\n")
    code, _, err = run_cli(["show", str(path)], capsys)
    assert_one_line(code, err, 2, [str(path), "cannot read recipe"])


# --- command-line arguments ------------------------------------------------------------

def _args(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    return {
        "unknown subcommand": (["frobnicate"], ["invalid choice", "frobnicate"]),
        "build without recipe": (["build"], ["needs a recipe", "--recipe", "assemble build --help"]),
        "unknown recipe": (["show", "no-such-recipe"], ["unknown recipe 'no-such-recipe'", "use one of", "cpu"]),
        "missing recipe file": (["show", str(tmp / "gone.toml")], ["no such recipe file"]),
        "define without value": (["show", "cpu", "-D", "GGML_CUDA"], ["--define 'GGML_CUDA'", "KEY=VALUE"]),
        "define bad name": (["show", "cpu", "-D", "1X=ON"], ["--define '1X=ON'", "KEY=VALUE"]),
        "cuda arch sm90": (["show", "cuda", "--cuda-arch", "sm90"], ["--cuda-arch: 'sm90' is not a CUDA", '"90"']),
        "cuda arch empty entry": (["show", "cuda", "--cuda-arch", "90,,"], ["--cuda-arch: '90,,' has an empty entry"]),
        "hip target 1100": (["show", "rocm", "--hip-target", "1100"], ["--hip-target: '1100' is not a gfx", "gfx1100"]),
        "jobs zero": (["show", "cpu", "-j", "0"], ["--jobs", "at least 1"]),
        "jobs not a number": (["show", "cpu", "-j", "many"], ["invalid int value: 'many'"]),
        "keep negative": (["build", "--recipe", "cpu", "--keep", "-1"], ["--keep", "0 or more"]),
        "check-env without =": (["build", "--recipe", "cpu", "--check-env", "GGML"], ["--check-env 'GGML'", "NAME=VALUE"]),
        "launcher unknown": (["show", "cpu", "--launcher", "distcc"], ["--launcher", "invalid choice"]),
        "package format rar": (["package", str(tmp / "empty"), "--format", "rar"], ["--format", "invalid choice"]),
        "package missing folder": (["package", str(tmp / "gone")], ["no such runtime folder"]),
        "package not a runtime": (["package", str(tmp / "empty")], ["no manifest.json"]),
        "matrix bad hip target": (["matrix", "--hip-targets", "navi31"], ["'navi31' is not a gfx target"]),
        "matrix empty hip targets": (["matrix", "--hip-targets", ","], ["--hip-targets: ',' has an empty entry"]),
        "matrix unknown format": (["matrix", "--format", "yaml"], ["invalid choice: 'yaml'"]),
        "verify missing folder": (["verify", str(tmp / "gone")], ["no such runtime folder"]),
        "build lib-path missing": (["build", "--recipe", "cpu", "--lib-path", str(tmp / "gone"), "--out",
                                    str(tmp / "out")], ["--lib-path", "no such folder"]),
        "repair lib-path missing": (["repair", str(tmp / "empty"), "--lib-path", str(tmp / "gone"), "--out",
                                     str(tmp / "out")], ["--lib-path", "no such folder"]),
    }


ARG_CASES = sorted(_args(Path("/nonexistent")))


@pytest.mark.parametrize("case", ARG_CASES)
def test_malformed_arguments(case, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv, words = _args(tmp_path)[case]
    code, _out, err = run_cli(argv, capsys)
    assert_one_line(code, err, 2, ["fix:", *words])


# --- source trees ----------------------------------------------------------------------

def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _sources(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    (tmp / "plain").mkdir()
    (tmp / "a-file").write_text("not a folder")
    wrong = tmp / "wrong-sha"
    (wrong / "ggml").mkdir(parents=True)
    (wrong / "CMakeLists.txt").write_text("project(x)\n")
    (wrong / "ggml" / "CMakeLists.txt").write_text("\n")
    _git(wrong, "init", "-q")
    _git(wrong, "add", ".")
    _git(wrong, "commit", "-qm", "not llama.cpp")
    return {
        "missing folder": (tmp / "gone", ["not a llama.cpp source tree"]),
        "empty folder": (tmp / "plain", ["not a llama.cpp source tree", "--source"]),
        "a file": (tmp / "a-file", ["not a llama.cpp source tree"]),
        "git at the wrong sha": (wrong, ["the local tree is at", f"pins {SHA}", f"checkout {SHA}"]),
    }


@pytest.mark.parametrize("case", ["missing folder", "empty folder", "a file", "git at the wrong sha"])
def test_malformed_source_tree(case, tmp_path, capsys, isolated_cache):
    path, words = _sources(tmp_path)[case]
    code, _, err = run_cli(["build", "--recipe", "cpu", "-q", "--source", str(path), "--out",
                            str(tmp_path / "out")], capsys)
    assert_one_line(code, err, 2, [str(path), "fix:", *words])
    assert not (tmp_path / "out").exists()


# --- patch metadata (patches are read from the packaged folder: the loader is called directly) --

PATCH_OK = '''name = "p"
patch = "p.patch"
fixes = "a bug"
'''
PATCHES = {
    "not toml": (PATCH_OK + "[[", "cannot read patch metadata"),
    "unknown key": (PATCH_OK + 'author = "x"\n', "unknown key(s)"),
    "name differs from file": (PATCH_OK.replace('name = "p"', 'name = "q"'), "differs from the file name"),
    "no fixes": (PATCH_OK.replace('fixes = "a bug"', ""), "missing 'fixes'"),
    "missing diff": (PATCH_OK.replace("p.patch", "gone.patch"), "no patch file 'gone.patch'"),
    "bad toolkit spec": (PATCH_OK + '[when]\ncuda_toolkit = "about 13"\n', "is not a comparison"),
    "short sha": (PATCH_OK + '[applies]\nshas = ["abc123"]\n', "not a full 40-hex sha"),
    "unknown feature": (PATCH_OK + '[applies]\nfeatures = ["time-travel"]\n', "time-travel"),
    "backend_dl not bool": (PATCH_OK + '[when]\nbackend_dl = "yes"\n', "expected true or false"),
}


@pytest.mark.parametrize("case", sorted(PATCHES))
def test_malformed_patch_metadata(case, tmp_path):
    text, words = PATCHES[case]
    (tmp_path / "p.patch").write_text("--- a/x\n+++ b/x\n")
    meta = tmp_path / "p.toml"
    meta.write_text(text)
    with pytest.raises(AssembleError) as info:
        load_patch(meta)
    line = info.value.line()
    assert info.value.code == 2
    assert "\n" not in line and str(meta) in line and words in line and "fix:" in line


# --- the real console script ------------------------------------------------------------

def test_subprocess_errors_are_one_line_and_debug_shows_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(RECIPES["rocm as backend"][0])
    proc = assemble("show", str(bad))
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        line for line in proc.stderr.splitlines() if line.startswith("error: ")] and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    debug = assemble("show", str(bad), "--debug")
    assert debug.returncode == 2 and "Traceback" in debug.stderr and "unknown backend 'rocm'" in debug.stderr
    usage = assemble("package")
    assert usage.returncode == 2 and len(usage.stderr.strip().splitlines()) == 1


def test_a_bug_in_assemble_is_one_line_too(monkeypatch, capsys):
    """An exception nobody foresaw (a bug) still ends in one line and exit 1; --debug adds the traceback."""
    from builder.cli.commands import list as list_command

    def broken(args):
        raise ValueError("unbalanced parenthesis at position 32")
    monkeypatch.setattr(list_command, "run", broken)
    assert cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "internal error: ValueError: unbalanced parenthesis at position 32" in err and "--debug" in err
    assert cli.main(["list", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["build", "cpu", "--no-such-option", "--json"], ["unrecognized arguments: --no-such-option"]),
    (["--json", "repair"], ["the following arguments are required: INPUT"]),
    (["verify", "--json"], ["the following arguments are required: runtime"]),
    (["--out", "x", "build", "cpu", "--json"], ["--out belongs after the command"]),
])
def test_an_argument_error_with_json_is_a_refusal_object_too(argv, words, capsys):
    """A parse error is a refusal like any other: with --json its object is on stdout, the line on stderr."""
    code, out, err = run_cli(argv, capsys)
    assert_one_line(code, err, 2, words)
    refusal = json.loads(out)["error"]
    assert refusal["exit"] == 2 and all(w in refusal["what"] for w in words) and refusal["fix"]


def test_an_argument_error_without_json_prints_nothing_on_stdout(capsys):
    code, out, err = run_cli(["build", "cpu", "--no-such-option"], capsys)
    assert_one_line(code, err, 2, ["--no-such-option"])
    assert out == ""
