"""assemble show: the resolved configuration of a recipe and the exact cmake lines. Writes nothing."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from builder import ui
from builder.units.plan import PLACEHOLDER
from builder.cli.args import Subparsers, add_plan_options, add_recipe, cli_options
from builder.config.options import BuildConfig, resolve
from builder.config.recipe import load_recipe
from builder.runtime.layout import BACKEND_OPS

if TYPE_CHECKING:
    from builder.toolchain.rules import Finding


# show takes the plan options only: build's examples with --out or --check-env would not parse here
SHOW_EXAMPLES = """examples:
  assemble show cpu
  assemble show cuda-vulkan --cuda-arch 90
  assemble show rocm --rocm-path /opt/rocm-6.4 --hip-target gfx1100
  assemble show cpu --json
A line holding a placeholder (a tool this host lacks, a tree not fetched yet: <...>) is printed
commented out; a unit this host's build would refuse gets a warning in build's own words."""


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("show", parents=[common], help="print a recipe's resolved plan and cmake command lines",
                       description="Print the resolved configuration of a recipe (every value with the step of the "
                       "cascade it came from) and the exact cmake command lines, without fetching, configuring or "
                       "writing anything; this host's tools are probed, read-only, for their paths.",
                       epilog=SHOW_EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe(p)
    add_plan_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.flows.build import preview

    recipe = load_recipe(args.recipe)
    config = resolve(recipe, cli_options(args))
    previews = preview(config)
    plans = [v.plan for v in previews]
    for v in previews:
        if v.refusal:
            ui.warn(f"unit {v.plan.unit.name}: `assemble build` would stop on this host: {v.refusal.means}"
                    + (f" (fix: {v.refusal.fix})" if v.refusal.fix else ""))
    if args.json:
        print(json.dumps({"recipe": recipe.name, "backends": list(recipe.backends), "sha": recipe.pin.sha,
                          "features": list(recipe.pin.features), "mirrors": [m.label() for m in config.recipe.pin.mirrors],
                          "config": config.as_dict(), "tests": _tests(config),
                          "units": [{"name": p.unit.name, "backends": list(p.unit.backends),
                                     "container": p.unit.where.image, "build_dir": str(p.build_dir),
                                     "defines": dict(p.defines), "configure": list(p.configure),
                                     "build": list(p.build), "env": dict(p.env),
                                     "environment": p.environment.as_dict(),
                                     "runnable": not p.placeholders(), "placeholders": list(p.placeholders()),
                                     "refused_here": _refusal(v.refusal)}
                                    for v in previews for p in (v.plan,)]}, indent=2))
        return 0
    print(f"recipe     {recipe.name} ({recipe.path})")
    print(f"           {recipe.description}")
    print(f"backends   {', '.join(recipe.backends)}")
    print(f"llama.cpp  {recipe.pin.sha}")
    print(f"features   {', '.join(recipe.pin.features) or '(none)'}")
    print(f"mirrors    {'; '.join(m.label() for m in config.recipe.pin.mirrors)}")
    print(f"targets    {', '.join(config.targets)}")
    tests = _tests(config)
    built = ", ".join(f"{t} (unit {u}, into the runtime's tests/)" for t, u in tests.items()) or "none"
    print(f"tests      {built}; [tests] backend_ops = {str(recipe.tests.backend_ops).lower()}")
    print(f"jobs       {config.jobs.value} (from {config.jobs.origin}); launcher {config.launcher.value}")
    if config.remote_cache.value:
        print(f"cache      {config.remote_cache.value} (from {config.remote_cache.origin})")   # str(): redacted
    for p in plans:
        u = p.unit
        targets = [str(a) for a in u.cuda_archs] + [str(t) for t in u.hip_targets]
        print(f"\nunit {u.name} [{', '.join(u.backends)}] on {u.where.label()}"
              + (f"; targets {' '.join(targets)}" if targets else ""))
        for k, value in p.env:       # one holding a placeholder is commented out, as the cmake lines are
            print(f"  {'# ' if PLACEHOLDER.search(value) else ''}env {k}={value}")
        if notice := p.environment.notice():
            print(f"  env {notice[0]}")
        configure, build = p.lines()
        if held := p.placeholders():
            # commented out, so a copied line cannot run with a placeholder in it
            print(f"  # not runnable as shown; placeholders (what this host lacks, or a tree not fetched yet): "
                  f"{'; '.join(held)}")
            print(f"  # {configure}")
            print(f"  # {build}")
        else:
            print(f"  {configure}")
            print(f"  {build}")
    return 0


def _tests(config: BuildConfig) -> dict[str, str]:
    """Test program -> the unit that builds it ([tests] in the recipe)."""
    unit = next((u.name for u in config.units if u.backend_ops), None)
    return {BACKEND_OPS: unit} if unit else {}


def _refusal(finding: Finding | None) -> dict[str, Any] | None:
    """build's refusal of a unit on this host, in the rules' words (None: build would go on)."""
    if finding is None:
        return None
    return {"topic": finding.topic, "found": finding.found, "means": finding.means, "fix": finding.fix}
