"""assemble show: the resolved configuration of a recipe and the exact cmake lines. Writes nothing."""

from __future__ import annotations

import argparse
import json

from builder.cli.args import EXAMPLES, add_plan_options, add_recipe, cli_options
from builder.config.options import resolve
from builder.config.recipe import load_recipe


def register(sub, common) -> None:
    p = sub.add_parser("show", parents=[common], help="print a recipe's resolved plan and cmake command lines",
                       description="Print the resolved configuration of a recipe (every value with the step of the "
                       "cascade it came from) and the exact cmake command lines, without fetching, configuring or "
                       "writing anything; this host's tools are probed, read-only, for their paths.",
                       epilog=EXAMPLES.replace("assemble build --recipe", "assemble show"),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p)
    add_plan_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from builder.pipeline import preview

    recipe = load_recipe(args.recipe)
    config = resolve(recipe, cli_options(args))
    plans = preview(config)
    if args.json:
        print(json.dumps({"recipe": recipe.name, "backends": list(recipe.backends), "sha": recipe.pin.sha,
                          "features": list(recipe.pin.features), "mirrors": [m.label() for m in config.recipe.pin.mirrors],
                          "config": config.as_dict(),
                          "units": [{"name": p.unit.name, "backends": list(p.unit.backends),
                                     "container": p.unit.where.image, "build_dir": str(p.build_dir),
                                     "defines": dict(p.defines), "configure": list(p.configure),
                                     "build": list(p.build), "env": dict(p.env),
                                     "environment": p.environment.as_dict()}
                                    for p in plans]}, indent=2))
        return 0
    print(f"recipe     {recipe.name} ({recipe.path})")
    print(f"           {recipe.description}")
    print(f"backends   {', '.join(recipe.backends)}")
    print(f"llama.cpp  {recipe.pin.sha}")
    print(f"features   {', '.join(recipe.pin.features) or '(none)'}")
    print(f"mirrors    {'; '.join(m.label() for m in config.recipe.pin.mirrors)}")
    print(f"targets    {', '.join(config.targets)}")
    print(f"jobs       {config.jobs.value} (from {config.jobs.origin}); launcher {config.launcher.value}")
    for p in plans:
        u = p.unit
        targets = [str(a) for a in u.cuda_archs] + [str(t) for t in u.hip_targets]
        print(f"\nunit {u.name} [{', '.join(u.backends)}] on {u.where.label()}"
              + (f"; targets {' '.join(targets)}" if targets else ""))
        for k, v in p.env:
            print(f"  env {k}={v}")
        if notice := p.environment.notice():
            print(f"  env {notice[0]}")
        configure, build = p.lines()
        print(f"  {configure}")
        print(f"  {build}")
    return 0
