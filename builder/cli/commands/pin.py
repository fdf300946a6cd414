"""assemble pin: resolve a llama.cpp ref by the features a recipe needs, and record the sha."""

from __future__ import annotations

import argparse
import json

from builder import ui
from builder.cli.args import Subparsers, add_recipe
from builder.errors import AssembleError
from builder.config.recipe import Recipe, load_recipe

EPILOG = """examples:
  assemble pin cpu --repo ~/src/llama.cpp                  pin origin's HEAD, if it has the features
  assemble pin cuda --repo ~/src/llama.cpp --ref b7000     pin a tag
  assemble pin my.toml --repo ~/src/llama.cpp --earliest   the oldest commit from which all are there
  assemble pin my.toml --repo DIR --lock                   write my.lock.json instead of editing my.toml

--earliest: on REF's first-parent history, the oldest commit C such that C and every
commit after it up to REF has all the recipe's features (a feature removed and added
back counts from its return). The output names the feature that decided C."""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("pin", parents=[common], help="pin llama.cpp to a commit that has the recipe's features",
                       description="Resolve REF to a full sha in a llama.cpp git repository, check every feature "
                       "the recipe lists there (reading git objects, no checkout), and write the sha into "
                       "the recipe (comments kept) or a lock file beside it.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p)
    p.add_argument("--repo", metavar="URL|DIR",
                   help="llama.cpp git repository (default: the recipe's first git mirror, mirrored under the cache)")
    p.add_argument("--ref", default="HEAD", help="branch, tag or sha to resolve (default: HEAD)")
    p.add_argument("--earliest", action="store_true",
                   help="pin the oldest commit from which every commit up to REF has all the features")
    p.add_argument("--lock", action="store_true", help="write RECIPE.lock.json beside the recipe instead of editing it")
    p.add_argument("--dry-run", action="store_true", help="resolve and check, but write nothing")
    p.set_defaults(func=run)


def _default_repo(recipe: Recipe) -> str:
    for m in recipe.pin.mirrors:
        if m.kind == "git" and m.url:
            return m.url
        if m.kind == "local" and m.path:
            return m.path
    raise AssembleError(f"recipe {recipe.name} has no git mirror to pin from", where=str(recipe.path),
                        fix="pass --repo with a llama.cpp clone")


def run(args: argparse.Namespace) -> int:
    from builder.source import pin as pinning   # here: `--help` needs no git reader
    recipe = load_recipe(args.recipe)
    spec = args.repo or _default_repo(recipe)
    ui.step(f"pin {recipe.name}: {', '.join(recipe.pin.features) or '(no features)'} at {args.ref} in {spec}")
    with pinning.open_repo(spec) as repo:
        result = pinning.pin(repo, args.ref, recipe.pin.features, earliest=args.earliest)
    written = None
    if not args.dry_run:
        if args.lock:
            written = str(pinning.write_lock(recipe, result))
        elif pinning.write_recipe_pin(recipe.path, result.sha, result.build):
            written = str(recipe.path)
    if args.json:
        data = pinning.result_json(recipe, result)
        data["written"] = written
        print(json.dumps(data, indent=2))
        return 0
    head = result.head
    print(f"{args.ref} = {head.sha} ({head.date[:10]}, {head.subject})")
    for name, evidence in result.report.present.items():
        print(f"  {ui.ok('have')} {name}: {evidence}")
    e = result.earliest
    if e is not None:
        print(f"earliest: {e.commit.sha}")
        print(f"  {e.explain(args.ref)}")
        print(f"  ({e.checked} of {e.history} first-parent commits examined, {e.seconds:.2f}s)")
    build = f" ({result.build})" if result.build else " (no bNNNN tag reaches it: names carry no build number)"
    if written:
        print(f"pinned {result.sha}{build} in {written}")
    elif args.dry_run:
        print(f"would pin {result.sha}{build} (dry run, nothing written)")
    else:
        print(f"{recipe.path} already pins {result.sha}{build}")
    return 0
