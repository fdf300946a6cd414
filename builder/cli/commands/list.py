"""assemble list: the recipes this version ships."""

from __future__ import annotations

import argparse
import json

from builder.cli.args import Subparsers
from builder.config.recipe import all_recipes


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("list", parents=[common], help="list the shipped recipes",
                       description="List the recipes shipped with this version of assemble.",
                       epilog="examples:\n  assemble list\n  assemble list --json | jq -r '.[].name'",
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recipes = all_recipes()
    if args.json:
        print(json.dumps([{"name": r.name, "aliases": list(r.aliases), "backends": list(r.backends),
                           "sha": r.pin.sha, "description": r.description} for r in recipes], indent=2))
        return 0
    width = max(len(r.name) for r in recipes)
    for r in recipes:
        alias = f" (alias {', '.join(r.aliases)})" if r.aliases else ""
        print(f"{r.name.ljust(width)}  {'+'.join(r.backends):<16} {r.pin.sha[:12]}  {r.description}{alias}")
    return 0
