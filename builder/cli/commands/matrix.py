"""assemble matrix: the runtimes a release pipeline builds, and what each runner needs."""

from __future__ import annotations

import argparse

from builder.config.targets import GfxTarget
from builder.release.matrix import FORMATS, entries, render
from builder.config.recipe import load_recipe


def register(sub, common) -> None:
    p = sub.add_parser("matrix", parents=[common], help="print the CI build matrix (recipes x GPU archs)",
                       description="Print one entry per recipe and GPU arch (a CUDA runtime carries its list of "
                       "architectures; a HIP runtime is built per gfx target), with the `assemble build` "
                       "arguments, the archive name and what the runner needs.",
                       epilog="examples:\n  assemble matrix\n"
                       "  echo \"matrix=$(assemble matrix --format github)\" >> \"$GITHUB_OUTPUT\"\n"
                       "  assemble matrix --recipe rocm --hip-targets gfx1100,gfx1030,gfx942",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", choices=FORMATS, default="json",
                   help="github: one line {\"include\": [...]} for a job matrix; json: a readable list (default)")
    p.add_argument("--recipe", action="append", default=[], metavar="NAME",
                   help="only this recipe (name, alias or .toml path); repeatable (default: every shipped recipe)")
    p.add_argument("--hip-targets", metavar="LIST", help="gfx targets to build every HIP recipe for, replacing "
                   "each recipe's own (e.g. gfx1100,gfx942)")
    p.add_argument("--stage", choices=("all", "units", "runtimes"), default="all",
                   help="units: only the --only-unit jobs of split recipes (run them first); runtimes: every "
                        "other job (default: all)")
    p.set_defaults(func=run)


def run(args) -> int:
    recipes = [load_recipe(r) for r in args.recipe] or None
    targets = GfxTarget.parse_list(args.hip_targets, "--hip-targets") if args.hip_targets is not None else ()
    items = entries(recipes, targets)
    if args.stage != "all":
        items = [e for e in items if (e.unit is not None) == (args.stage == "units")]
    print(render(items, args.format))
    return 0
