"""assemble build: recipe -> verified runtime folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.cli.args import EXAMPLES, Subparsers, add_plan_options, add_recipe, cli_options, env_pairs, lib_dirs
from builder.cli.result import print_runtime
from builder.config.options import BuildConfig, resolve
from builder.errors import AssembleError
from builder.config.recipe import load_recipe


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("build", parents=[common], help="build, bundle and verify a runtime",
                       description="Build llama.cpp at the recipe's pinned sha, bundle every library it needs "
                       "into a relocatable runtime-<recipe>/ folder, and verify it.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p)
    p.add_argument("--out", metavar="DIR", help="output folder (default: ./runtime-<recipe>): a new folder, an empty "
                   "one, or a runtime assemble built (moved aside, never deleted); anything else is refused")
    add_plan_options(p)
    p.add_argument("--check-env", action="append", default=[], metavar="NAME=VALUE",
                   help="variable for the device checks' otherwise empty environment; repeatable")
    p.add_argument("--no-verify", action="store_true", help="skip the checks after bundling (not recommended)")
    p.add_argument("--verify-static", action="store_true", help="after bundling, run only the checks that read "
                   "files (for a runtime meant for another host, e.g. one needing a newer glibc than this one)")
    p.add_argument("--keep", type=int, metavar="N", help="delete the runtimes this tool moved aside from this --out "
                   "beyond the newest N (default: keep all; nothing is deleted)")
    p.add_argument("--no-wait", action="store_true", help="fail instead of waiting when another run holds the output")
    p.add_argument("--lib-path", action="append", default=[], metavar="DIR",
                   help="also bundle vendor libraries from DIR (e.g. cuBLAS from NVIDIA's wheel); repeatable")
    p.add_argument("--only-unit", metavar="NAME", help="build this one unit of a multi-unit recipe and stop (no "
                   "runtime): its folder is for --unit-from on the machine that merges; with --out DIR, bin/ and "
                   "assemble-unit.json are exported there (a CI artifact; same --out rules as a runtime)")
    p.add_argument("--unit-from", action="append", default=[], metavar="NAME=DIR",
                   help="take unit NAME from a folder made by --only-unit elsewhere instead of compiling it; "
                        "same recipe, sha, patches and ABI flags or it is refused; repeatable")
    p.set_defaults(func=run)


def config_of(args: argparse.Namespace) -> BuildConfig:
    """The build's resolved configuration: what `show`, `doctor` and `matrix` resolve the same way."""
    from builder.units import unitfolder
    return resolve(load_recipe(args.recipe), cli_options(args, unit_from=unitfolder.parse_specs(args.unit_from),
                                                         only_unit=args.only_unit))


def run(args: argparse.Namespace) -> int:
    from builder.flows.build import BuildRequest, build, build_unit  # heavy imports only when building
    from builder.runtime.layout import runtime_dir_name

    recipe = load_recipe(args.recipe)
    if args.keep is not None and args.keep < 0:
        raise AssembleError("--keep must be 0 or more", fix="write e.g. --keep 3")
    if args.no_verify and args.verify_static:
        raise AssembleError("--no-verify and --verify-static contradict each other", fix="pick one")
    out = Path(args.out) if args.out else Path.cwd() / runtime_dir_name(recipe.name)
    config = config_of(args)
    req = BuildRequest(config=config, out=out, check_env=env_pairs(args.check_env), verify=not args.no_verify,
                       verify_static=args.verify_static, keep=args.keep, wait=not args.no_wait,
                       lib_paths=lib_dirs(args.lib_path),
                       unit_out=Path(args.out) if args.only_unit and args.out else None)
    if args.only_unit:
        print(build_unit(req))
        return 0
    print_runtime(build(req), args.json)
    return 0
