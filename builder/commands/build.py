"""assemble build: recipe -> verified runtime folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands._options import EXAMPLES, add_plan_options, overrides
from builder.commands.verify import env_pairs
from builder.errors import AssembleError
from builder.recipe import load_recipe


def register(sub, common) -> None:
    p = sub.add_parser("build", parents=[common], help="build, bundle and verify a runtime",
                       description="Build llama.cpp at the recipe's pinned sha, bundle every library it needs "
                       "into a relocatable runtime-<recipe>/ folder, and verify it.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", required=True, help="recipe name, alias or path to a .toml file")
    p.add_argument("--out", metavar="DIR", help="output folder (default: ./runtime-<recipe>)")
    add_plan_options(p)
    p.add_argument("--check-env", action="append", default=[], metavar="NAME=VALUE",
                   help="variable for the device checks' otherwise empty environment; repeatable")
    p.add_argument("--no-verify", action="store_true", help="skip the checks after bundling (not recommended)")
    p.add_argument("--keep", type=int, metavar="N", help="keep only the newest N moved-aside runtimes "
                   "(default: keep all; nothing is deleted)")
    p.add_argument("--no-wait", action="store_true", help="fail instead of waiting when another run holds the output")
    p.set_defaults(func=run)


def run(args) -> int:
    from builder.pipeline import BuildRequest, build  # heavy imports only when building

    recipe = load_recipe(args.recipe)
    if args.keep is not None and args.keep < 0:
        raise AssembleError("--keep must be 0 or more", fix="write e.g. --keep 3")
    out = Path(args.out) if args.out else Path.cwd() / f"runtime-{recipe.name}"
    req = BuildRequest(recipe=recipe, out=out, source=args.source, overrides=overrides(args),
                       check_env=tuple(env_pairs(args.check_env).items()), verify=not args.no_verify,
                       keep=args.keep, wait=not args.no_wait)
    result = build(req)
    if args.json:
        import json
        from builder import manifest
        print(json.dumps({"runtime": str(result), "manifest": manifest.read(result)}, indent=2))
    else:
        print(result)
    return 0
