"""assemble show: the resolved plan of a recipe, with the exact cmake lines. No side effects."""

from __future__ import annotations

import json
from builder.build import cmake
from builder.toolchain import container
from builder.cli.args import EXAMPLES, add_plan_options, overrides
from builder.config.recipe import load_recipe


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
    from builder.pipeline import preview

    plans = preview(recipe, args.source, o)
    where = [container.unit_container(u.container, o.container) for u in recipe.units]
    if args.json:
        print(json.dumps({"recipe": recipe.name, "backends": list(recipe.backends), "sha": recipe.pin.sha,
                          "features": list(recipe.pin.features), "mirrors": [m.label() for m in recipe.pin.mirrors],
                          "units": [{"name": p.unit.name, "backends": list(p.unit.backends),
                                     "container": w, "build_dir": str(p.build_dir),
                                     "defines": dict(p.defines), "configure": list(p.configure),
                                     "build": list(p.build), "env": dict(p.env)}
                                    for p, w in zip(plans, where)]}, indent=2))
        return 0
    print(f"recipe     {recipe.name} ({recipe.path})")
    print(f"           {recipe.description}")
    print(f"backends   {', '.join(recipe.backends)}")
    print(f"llama.cpp  {recipe.pin.sha}")
    print(f"features   {', '.join(recipe.pin.features) or '(none)'}")
    print(f"mirrors    {'; '.join(m.label() for m in recipe.pin.mirrors)}")
    print(f"targets    {', '.join(plans[0].targets)}")
    for p, w in zip(plans, where):
        print(f"\nunit {p.unit.name} [{', '.join(p.unit.backends)}] on {f'container {w}' if w else 'host'}")
        for k, v in p.env:
            print(f"  env {k}={v}")
        print(f"  {cmake.command_line(p.configure)}")
        print(f"  {cmake.command_line(p.build)}")
    return 0
