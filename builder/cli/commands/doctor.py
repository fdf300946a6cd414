"""assemble doctor: one table of this host's toolchains and what they mean; with --recipe, a verdict."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import textwrap
from typing import TYPE_CHECKING

from builder.cli.args import Subparsers, add_recipe, add_toolkit_options
from builder.config.options import CliOptions
from builder.errors import AssembleError
from builder.config.recipe import load_recipe
from builder.toolchain.detect import PROBE_TIMEOUT

if TYPE_CHECKING:   # the probes are imported where they run: every other command starts without them
    from builder.check import doctor

EXAMPLES = """examples:
  assemble doctor                          what this host has, in seconds
  assemble doctor --recipe cuda-vulkan     can that recipe build here? (exit 1 if not)
  assemble doctor --recipe rocm --rocm-path /opt/rocm-6.4 --json
exit status: 0 ready (or no recipe given), 1 the recipe cannot build here, 2 bad input"""

MAX_TIMEOUT = 600.0   # a probe that needs longer is a hung tool, not a slow one


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[common], help="check this host's toolchains before building",
                       description="Find Python, CMake, Ninja, patchelf, compilers, CUDA, Vulkan, ROCm, container "
                       "engines, GPUs and PCIe atomics; say what each means and, for a recipe, whether it is "
                       "ready, missing something (with the install command for this distribution) or will be "
                       "slower. Every probe is time-bounded.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p, required=False, what="also judge this recipe")
    add_toolkit_options(p)
    p.add_argument("--timeout", type=float, default=PROBE_TIMEOUT, metavar="SECONDS",
                   help=f"bound on each probe (default {PROBE_TIMEOUT:g})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT):
        raise AssembleError(f"--timeout {args.timeout:g} is not a number of seconds between 0 and {MAX_TIMEOUT:g}",
                            where="--timeout", fix=f"write e.g. --timeout {PROBE_TIMEOUT:g}")
    from builder.check import doctor
    recipe = load_recipe(args.recipe) if args.recipe else None  # bad recipe: exit 2 before probing
    cli = CliOptions(cuda_root=args.cuda_root, rocm_path=args.rocm_path)
    report = doctor.diagnose(recipe, cli=cli, timeout=args.timeout)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render(report, verbose=args.verbose, quiet=args.quiet))
    return report.exit_code


def _paint(status: str, text: str) -> str:
    from builder.check import doctor
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb":
        colour = {doctor.OK: "32", doctor.WARN: "33", doctor.MISSING: "31", doctor.INFO: "36"}[status]
        return f"\033[{colour}m{text}\033[0m"
    return text


def render(report: doctor.Diagnosis, *, verbose: bool = False, quiet: bool = False, width: int | None = None) -> str:
    """The table: status, check, what was found; below a row, what it means and how to fix it.
    Quiet keeps only rows that need action; verbose also explains the rows that are fine."""
    from builder.check import doctor
    width = width or max(60, min(shutil.get_terminal_size((100, 24)).columns, 140))
    name_w = max(len(c.name) for c in report.checks) + 2
    lead = 2 + 9 + name_w
    lines: list[str] = []

    def wrap(text: str, first: str, indent: int) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=" " * indent,
                             break_on_hyphens=False) or [first]

    section = None
    for c in report.checks:
        if quiet and c.status in (doctor.OK, doctor.INFO):
            continue
        if c.section != section:
            section = c.section
            title = "this host" if section == "host" else f"recipe {report.recipe}"
            lines += ([""] if lines else []) + [title]
        word = doctor.DOCTOR_WORDS[c.status]
        row = wrap(c.reason, f"  {word:<8} {c.name:<{name_w}}", lead)
        row[0] = row[0].replace(f"{word:<8}", _paint(c.status, f"{word:<8}"), 1)
        lines += row
        explain = c.meaning and (c.status in (doctor.WARN, doctor.MISSING) or verbose or c.status == doctor.INFO)
        if explain:
            lines += wrap(c.meaning, " " * lead + "means: ", lead + 7)
        if c.hint and c.status != doctor.OK:
            lines += wrap(c.hint, " " * lead + "fix:   ", lead + 7)
    if report.verdict:
        state = {"ready": doctor.OK, "slower": doctor.WARN}.get(report.verdict.state, doctor.MISSING)
        lines += ["", _paint(state, report.verdict.line)]
    elif not quiet:
        lines += ["", "add --recipe NAME for a verdict on one recipe (assemble list shows them)"]
    return "\n".join(lines)
