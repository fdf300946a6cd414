"""assemble show: the resolved plan of a recipe, with the exact cmake lines. No side effects."""

from __future__ import annotations

import json
from pathlib import Path

from builder import cmake
from builder.commands._options import EXAMPLES, add_plan_options, overrides
from builder.recipe import load_recipe


def register(sub, common) -> None:
    p = sub.add_parser("show", parents=[common], help="print a recipe's resolved plan and cmake command lines",
                       description="Print the resolved build plan of a recipe, including the exact cmake command "
                       "lines, without fetching, configuring or writing anything.",
                       epilog=EXAMPLES.replace("assemble build --recipe", "assemble show"),
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("recipe", help="recipe name, alias or path to a .toml file")
    add_plan_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    recipe = load_recipe(args.recipe)
    o = overrides(args)
    source = Path(args.source).resolve() if args.source else Path("<cache>/sources") / recipe.pin.sha
    plans = [cmake.plan_unit(recipe, unit, source, recipe.pin.sha, o, strict=False) for unit in recipe.units]
    if args.json:
        print(json.dumps({"recipe": recipe.name, "backends": list(recipe.backends), "sha": recipe.pin.sha,
                          "features": list(recipe.pin.features), "mirrors": [m.label() for m in recipe.pin.mirrors],
                          "units": [{"name": p.unit.name, "backends": list(p.unit.backends),
                                     "container": p.unit.container, "build_dir": str(p.build_dir),
                                     "defines": dict(p.defines), "configure": list(p.configure),
                                     "build": list(p.build), "env": dict(p.env)} for p in plans]}, indent=2))
        return 0
    print(f"recipe     {recipe.name} ({recipe.path})")
    print(f"           {recipe.description}")
    print(f"backends   {', '.join(recipe.backends)}")
    print(f"llama.cpp  {recipe.pin.sha}")
    print(f"features   {', '.join(recipe.pin.features) or '(none)'}")
    print(f"mirrors    {'; '.join(m.label() for m in recipe.pin.mirrors)}")
    print(f"targets    {', '.join(plans[0].targets)}")
    for p in plans:
        where = f"container {p.unit.container}" if p.unit.container else "host"
        print(f"\nunit {p.unit.name} [{', '.join(p.unit.backends)}] on {where}")
        for k, v in p.env:
            print(f"  env {k}={v}")
        print(f"  {cmake.command_line(p.configure)}")
        print(f"  {cmake.command_line(p.build)}")
    return 0
