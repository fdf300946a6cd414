"""The command line's conventions: global flags before or after the command, a bare `assemble`
prints help, and every command that takes a recipe takes it as NAME or as --recipe NAME."""

from __future__ import annotations

import json

import pytest

from builder.cli import main as cli
from tests.support.common import assemble, one_error_line
from tests.unit.cli.test_completion import complete
from tests.unit.cli.test_malformed import assert_one_line, run_cli

# command -> the arguments it needs besides the recipe
RECIPE_COMMANDS = {"build": [], "show": [], "fetch": [], "pin": [], "doctor": [], "matrix": []}


def test_global_flags_before_or_after_the_command():
    after, before = assemble("list", "--json", check=True), assemble("--json", "list", check=True)
    assert after.stdout == before.stdout and json.loads(before.stdout)[0]["name"]
    assert assemble("--json", "show", "cpu", check=True).stdout == assemble("show", "cpu", "--json", check=True).stdout
    for argv in (["-q", "--debug", "list"], ["list", "-q", "--debug"], ["-q", "list", "--debug"]):
        args = cli.parser().parse_args(argv)
        assert (args.quiet, args.debug, args.verbose, args.json) == (True, True, False, False), argv
    assert cli.parser().parse_args(["-v", "show", "cpu"]).verbose


@pytest.mark.parametrize("argv, option, fix", [
    (["--recipe", "cpu", "build"], "--recipe", "`assemble build --recipe cpu`"),
    (["-q", "--recipe=cpu", "show", "--json"], "--recipe", "`assemble -q show --recipe=cpu --json`"),
    (["--jobs", "2", "build", "cpu"], "--jobs", "`assemble build --jobs 2 cpu`"),
])
def test_a_commands_option_before_the_command_says_where_it_goes(argv, option, fix):
    line = one_error_line(assemble(*argv), 2, [f"{option} belongs after the command", fix])
    assert "invalid choice" not in line and "-q, -v, --debug, --json" in line


def test_bare_assemble_prints_help_and_succeeds():
    proc = assemble()
    assert proc.returncode == 0 and proc.stderr == ""
    assert "usage: assemble" in proc.stdout and all(c in proc.stdout for c in cli.COMMANDS)
    assert assemble("-q").returncode == 0


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
def test_name_or_recipe_option(command):
    extra = RECIPE_COMMANDS[command]
    as_name = cli.parser().parse_args([command, "cpu", *extra])
    as_option = cli.parser().parse_args([command, "--recipe", "cpu", *extra])
    want = ["cpu"] if command == "matrix" else "cpu"
    assert as_name.recipe == as_option.recipe == want
    assert not hasattr(as_name, "recipe_option") and not hasattr(as_name, "recipe_positional")


@pytest.mark.parametrize("command", sorted(RECIPE_COMMANDS))
def test_both_spellings_are_refused_in_one_line(command, capsys):
    code, out, err = run_cli([command, "cpu", "--recipe", "cpu", *RECIPE_COMMANDS[command]], capsys)
    assert_one_line(code, err, 2, ["given twice", f"assemble {command} NAME", f"assemble {command} --recipe NAME"])
    assert out == ""


@pytest.mark.parametrize("command", sorted(set(RECIPE_COMMANDS) - {"matrix"}))
def test_two_names_are_refused_in_one_line(command, capsys):
    code, _out, err = run_cli([command, "--recipe", "cpu", "--recipe", "vulkan", *RECIPE_COMMANDS[command]], capsys)
    assert_one_line(code, err, 2, ["two recipes given (cpu, vulkan)", f"{command} takes one"])
    code, _, err = run_cli([command, "cpu", "vulkan"], capsys)    # a second NAME: argparse's own refusal
    assert_one_line(code, err, 2, ["unrecognized arguments: vulkan"])


def test_a_recipe_is_required_where_it_must_be(capsys):
    for command in ("build", "show", "fetch", "pin"):
        code, _, err = run_cli([command], capsys)
        assert_one_line(code, err, 2, [f"{command} needs a recipe", "--recipe", f"assemble {command} --help"])
    assert cli.parser().parse_args(["doctor"]).recipe is None
    assert cli.parser().parse_args(["matrix"]).recipe == []


def test_the_real_commands_agree_on_both_spellings():
    """Not only the parser: the command's output is the same for NAME and --recipe NAME."""
    assert assemble("show", "--recipe", "cpu", "--json", check=True).stdout == \
        assemble("show", "cpu", "--json", check=True).stdout
    assert assemble("matrix", "cpu", "vulkan", check=True).stdout == \
        assemble("matrix", "--recipe", "cpu", "--recipe", "vulkan", check=True).stdout
    bad = assemble("fetch", "--recipe", "no-such-recipe")    # refused before any download
    assert bad.returncode == 2 and "unknown recipe 'no-such-recipe'" in bad.stderr


def test_completion_after_global_flags_and_for_both_spellings():
    script = assemble("completion", "bash", check=True).stdout
    assert complete(script, ["assemble", "--json", "sh"]) == ["show"]
    assert complete(script, ["assemble", "--j"]) == ["--json"]
    assert "cuda-vulkan" in complete(script, ["assemble", "-v", "show", "cuda-v"])
    assert "cuda-vulkan" in complete(script, ["assemble", "build", "cuda-v"])
    assert "cuda-vulkan" in complete(script, ["assemble", "doctor", "--recipe", "cuda-v"])
    assert "--recipe" in complete(script, ["assemble", "--quiet", "fetch", "--re"])
