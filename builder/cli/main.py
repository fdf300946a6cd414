"""Command-line shell: argument parsing, output level, exit codes. No logic lives here.

Each subcommand is a module in builder/cli/commands/ with a `register(subparsers)`
function that adds its parser and sets `func(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from builder import __version__, paths, ui
from builder.cli.args import settle_recipe
from builder.errors import FAILED, AssembleError, from_interrupt, interrupted

COMMANDS = ["build", "repair", "fetch", "list", "show", "verify", "pin", "doctor", "toolchain", "image", "package", "deploy", "matrix", "completion"]

EPILOG = """examples:
  assemble list                         recipes shipped with this version
  assemble show cuda-vulkan             the resolved plan and exact cmake lines
  assemble build --recipe cpu           build, bundle and verify runtime-cpu/
  assemble verify runtime-cpu --smoke   prove a runtime works on this host
exit status: 0 ok, 1 a build or check failed (or the disk is full), 2 bad input (recipe, arguments, source,
  repair's inputs), 130 interrupted (Ctrl-C); with --json a refusal is also printed on stdout as
  {"error": {"what", "where", "fix", "exit"}}"""


_json_asked = False   # --json among the arguments being parsed: a parse error is a refusal object too


def _asks_json(argv: list[str]) -> bool:
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line like every other error (subcommand parsers inherit it)
        self.exit(refused(AssembleError(message, fix=f"see `{self.prog} --help`"), _json_asked))

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]  # typeshed: overloads generic in the namespace
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        ns, rest = super().parse_known_args(args, namespace)
        try:
            settle_recipe(ns)          # NAME or --recipe NAME, whichever was given: args.recipe
        except AssembleError as exc:
            self.exit(refused(exc, getattr(ns, "json", False) is True))
        return ns, rest


def global_flags(p: argparse.ArgumentParser, default: object) -> None:
    """-q -v --debug --json: before the command (default False) or after it (default SUPPRESS, so a
    flag given before is not reset by the command's parser)."""
    p.add_argument("-q", "--quiet", action="store_true", default=default, help="only errors and the result")
    p.add_argument("-v", "--verbose", action="store_true", default=default, help="show every step and command")
    p.add_argument("--debug", action="store_true", default=default, help="show the traceback of an error")
    p.add_argument("--json", action="store_true", default=default, help="print the result as JSON on stdout")


def parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="assemble", description="Turn a pinned llama.cpp into a relocatable, "
                                "verified multi-backend GPU runtime.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"assemble {__version__}")
    global_flags(p, False)
    common = argparse.ArgumentParser(add_help=False)
    global_flags(common, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"builder.cli.commands.{name.replace('-', '_')}").register(sub, common)
    return p


# Python packages assemble needs (pyproject.toml) by the module name that fails to import.
_DISTRIBUTIONS = {"elftools": "pyelftools", "requests": "requests", "zstandard": "zstandard", "pefile": "pefile",
                  "urllib3": "requests", "charset_normalizer": "requests", "idna": "requests", "certifi": "requests",
                  "packageurl": "packageurl-python"}


def _misplaced_option(p: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """A command's option written before the command (`assemble --recipe cpu build`): argparse would
    call the option's value an invalid command; say where the option goes instead."""
    own = {s for a in p._actions for s in a.option_strings}
    for i, word in enumerate(argv):
        if word in own or (word[:1] == "-" and word[1:].isalpha() and all(f"-{c}" in own for c in word[1:])):
            continue                                  # its own flag, or short ones together (-qv)
        if not word.startswith("-") or word in ("-", "--"):
            return None
        option = word.split("=", 1)[0]
        command = next((w for w in argv[i:] if w in COMMANDS), None)
        if command is None:                           # no command at all: argparse's own words
            return None
        rest = [w for w in argv[i:] if w != command]
        example = " ".join(["assemble", *argv[:i], command, *rest])
        before = ", ".join(min(a.option_strings, key=len) for a in p._actions
                           if a.option_strings and not isinstance(a, argparse._HelpAction))
        return f"error: {option} belongs after the command, not before it -- fix: write `{example}` (only {before} go before it)"
    return None


def main(argv: list[str] | None = None) -> int:
    global _json_asked  # noqa: PLW0603 -- one process-wide flag the error paths read
    argv = sys.argv[1:] if argv is None else argv
    _json_asked = _asks_json(argv)
    try:
        p = parser()
        if misplaced := _misplaced_option(p, argv):
            print(misplaced, file=sys.stderr)
            if _json_asked:
                what, _, fix = misplaced.removeprefix("error: ").partition(" -- fix: ")
                _print_json_refusal(what, None, fix or None, 2)
            return 2
        args = p.parse_args(argv)
    except ModuleNotFoundError as exc:   # the command modules import lazily, but a broken install shows here
        ui.error(_missing_dependency(exc))
        return 2
    if args.command is None:             # bare `assemble`: what it can do
        p.print_help()
        return 0
    ui.set_level(ui.QUIET if args.quiet or args.json else ui.VERBOSE if args.verbose else ui.NORMAL)
    try:
        paths.clean_stale_scratch()   # scratch folders of runs killed before they could clean up
        return int(args.func(args) or 0)
    except AssembleError as exc:
        if args.debug:
            traceback.print_exc()
        return refused(exc, args.json)
    except KeyboardInterrupt:   # a command whose state needs words (build's swap) says them itself
        return interrupted()
    except BrokenPipeError:  # e.g. `assemble matrix | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except ModuleNotFoundError as exc:
        if args.debug:
            traceback.print_exc()
        ui.error(_missing_dependency(exc))
        return 2
    except OSError as exc:  # the system refused something we did not foresee: still one line
        if args.debug:
            traceback.print_exc()
        return refused(paths.full_disk(exc) or AssembleError(
            str(exc.strerror or exc), where=str(exc.filename) if getattr(exc, "filename", None) else None,
            fix="check free space and permissions there (--debug shows where)", code=FAILED), args.json)
    except Exception as exc:  # noqa: BLE001 -- a bug in assemble: still one line, the traceback on request
        if from_interrupt(exc):
            return interrupted()
        if args.debug:
            traceback.print_exc()
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        ui.error(f"internal error: {type(exc).__name__}: {exc} (at {Path(frame.filename).name}:{frame.lineno}) "
                 "-- fix: this is a bug in assemble; rerun with --debug and report the traceback")
        return 1


def refused(exc: AssembleError, as_json: bool) -> int:
    """A refusal: its one line on stderr (and its details), with --json also as an object on stdout,
    {"error": {"what", "where", "fix", "exit"}}, so a script reading stdout is never left with nothing."""
    ui.error(exc.line())
    if exc.details:
        print(exc.details, file=sys.stderr)
    if as_json:
        _print_json_refusal(exc.what, exc.where, exc.fix, exc.code)
    return exc.code


def _print_json_refusal(what: str, where: str | None, fix: str | None, code: int) -> None:
    import json
    print(json.dumps({"error": {"what": what, "where": where, "fix": fix, "exit": code}}, indent=2))


def _missing_dependency(exc: ModuleNotFoundError) -> str:
    module = (exc.name or "?").split(".")[0]
    if module == "builder":
        return (f"this installation of assemble is incomplete ({exc}) -- fix: reinstall it: pip install . "
                "(from the checkout)")
    dist = _DISTRIBUTIONS.get(module, module)
    return (f"the Python package {dist} (module {module}) is not installed in {sys.executable} -- fix: "
            f"pip install {dist}, or reinstall assemble with its dependencies (pip install .)")
