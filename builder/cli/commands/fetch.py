"""assemble fetch: the recipe's pinned llama.cpp tree, fetched and verified into the cache. Nothing compiles."""

from __future__ import annotations

import argparse
import json

from builder import ui
from builder.cli.args import Subparsers, add_recipe
from builder.config.options import with_mirrors
from builder.config.recipe import load_recipe
from builder.paths import cache_dir

EPILOG = """examples:
  assemble fetch rocm                              the pinned tree of the rocm recipe, into the cache
  assemble fetch cpu --mirror ~/src/llama.cpp      from a local clone first (then the recipe's mirrors)
  assemble fetch cuda --json | jq -r .path         where the tree is
  ASSEMBLE_CACHE=/srv/assemble assemble fetch rocm into another cache

The tree is checked by git (HEAD, the commit object's hash, every file) and lands in
<cache>/sources/<sha>/ ($ASSEMBLE_CACHE, else ~/.cache/assemble), where `assemble build`
and `assemble show` of every recipe pinned to that sha find it without a network.
A cached tree is reused: nothing is downloaded twice.
exit status: 0 the tree is in the cache, 1 no mirror could provide it, 2 bad input (recipe, arguments)"""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("fetch", parents=[common], help="fetch and verify a recipe's pinned llama.cpp tree, no compile",
                       description="Fetch the llama.cpp tree a recipe pins (its mirrors in order: git, the PyPI "
                       "sdist that vendors llama.cpp, a local repository), verify it with git and keep it in "
                       "the cache; print its path. Nothing is configured or compiled: a build host without "
                       "network can then build from that cache.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p)
    p.add_argument("--mirror", action="append", default=[], metavar="URL|DIR",
                   help="a git mirror tried before the recipe's own (a URL, or a local repository); repeatable")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.source.fetch import cached_tree, pinned_tree   # here: `--help` needs no downloader
    recipe = load_recipe(args.recipe)
    sha = recipe.pin.sha
    was_cached = cached_tree(sha) is not None
    ui.step(f"fetch {recipe.name}: llama.cpp {sha} into {cache_dir()}")
    tree = pinned_tree(with_mirrors(recipe, tuple(args.mirror)))
    if args.json:
        print(json.dumps({"recipe": recipe.name, "sha": tree.sha, "path": str(tree.path), "cache": str(cache_dir()),
                          "cached": was_cached, "provenance": tree.provenance}, indent=2))
        return 0
    if was_cached:
        ui.info("already in the cache (verified when it was fetched)")
    print(tree.path)
    return 0
