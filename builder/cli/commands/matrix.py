"""assemble matrix: the runtimes a release pipeline builds, and what each runner needs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from builder.config.targets import GfxTarget
from builder import __version__
from builder.cli.args import Subparsers, add_recipe
from builder.release.matrix import FORMATS, entries, render
from builder.config.recipe import SHA_RE, URL_RE, load_recipe
from builder.errors import AssembleError
from builder.proc import run as run_tool

if TYPE_CHECKING:   # the workflow writer is imported where it writes: every other command starts without it
    from builder.release import workflow

CHECKOUT = Path(__file__).resolve().parents[3]     # the folder builder/ sits in


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("matrix", parents=[common], help="print the CI build matrix (recipes x GPU archs)",
                       description="Print one entry per recipe and GPU arch (a CUDA runtime carries its list of "
                       "architectures; a HIP runtime is built per gfx target), with the `assemble build` "
                       "arguments, the archive name and what the runner needs.",
                       epilog="examples:\n  assemble matrix\n"
                       "  echo \"matrix=$(assemble matrix --format github)\" >> \"$GITHUB_OUTPUT\"\n"
                       "  assemble matrix --recipe rocm --hip-targets gfx1100,gfx1030,gfx942\n"
                       "  assemble matrix --emit github-actions > .github/workflows/release.yml   "
                       "# inside assemble's own checkout\n"
                       "  assemble matrix --emit github-actions --recipe recipes/mine.toml \\\n"
                       "      --assemble-repo https://github.com/OWNER/assemble.git --assemble-ref SHA "
                       "> .github/workflows/release.yml",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="github: one line {\"include\": [...]} for a job matrix; json: a readable list (default)")
    add_recipe(p, required=False, many=True, what="only these; default: every shipped recipe")
    p.add_argument("--hip-targets", metavar="LIST", help="gfx targets to build every HIP recipe for, replacing "
                   "each recipe's own (e.g. gfx1100,gfx942)")
    p.add_argument("--emit", choices=("github-actions",),
                   help="print a whole release workflow instead of the list: units -> runtimes (build, package) "
                        "-> release (SHA256SUMS, SBOMs, provenance); e.g. > .github/workflows/release.yml")
    p.add_argument("--runners", type=Path, metavar="FILE",
                   help="runner map for --emit (a TOML [runners] table, or pyproject.toml's [tool.assemble.runners]; "
                        "default: ./pyproject.toml's, else GitHub-hosted for cpu/vulkan/container jobs and "
                        "self-hosted cuda/rocm labels)")
    p.add_argument("--assemble-ref", metavar="SHA",
                   help="with --assemble-repo: the commit of assemble every --emit job installs (default: this "
                        "checkout's HEAD)")
    p.add_argument("--assemble-repo", metavar="URL",
                   help="the git repository holding that commit (default: none, allowed only when emitting from "
                        "assemble's own checkout: each job then installs the tag's own checkout)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="emit from a checkout with uncommitted changes (refused by default: the workflow would "
                        "not be what the commit holds)")
    p.add_argument("--stage", choices=("all", "units", "runtimes"), default="all",
                   help="units: only the --only-unit jobs of split recipes (run them first); runtimes: every "
                        "other job (default: all)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.release import workflow
    if args.json and args.format == "github":
        raise AssembleError("--json and --format github ask for two outputs", where="matrix",
                            fix="drop one: --json prints the readable list, --format github the one-line matrix")
    recipes = [load_recipe(r) for r in args.recipe] or None
    targets = GfxTarget.parse_list(args.hip_targets, "--hip-targets") if args.hip_targets is not None else ()
    items = entries(recipes, targets)
    if args.emit and (args.format is not None or args.stage != "all"):
        given = f"--format {args.format}" if args.format is not None else f"--stage {args.stage}"
        raise AssembleError(f"--emit github-actions writes the whole workflow, so {given} has nothing to shape",
                            where="matrix", fix=f"drop {given} (--emit prints every stage), or drop --emit "
                                                "for the matrix list")
    if args.emit:
        runners = workflow.load_runners(args.runners, items)
        pin, dirty = pinning(args.assemble_ref, args.assemble_repo)
        if dirty and not args.allow_dirty:
            raise AssembleError(f"this checkout has uncommitted changes ({_listed(dirty)}): the workflow would "
                                "not be what its commit holds", where=str(CHECKOUT),
                                fix="commit them, then emit again (or pass --allow-dirty)")
        doc = workflow.workflow(items, runners, pin)
        if args.json:           # the same workflow as JSON (which a YAML reader reads as it is)
            print(json.dumps(doc, indent=2))
            return 0
        installs = (f"assemble from the tag's own checkout (generated at {pin.ref})" if pin.repo is None
                    else f"assemble {pin.ref} of {pin.repo}")
        print(workflow.to_yaml(doc, header=(
            f"Generated by `assemble matrix --emit github-actions` (assemble {__version__}) from the recipes' pins\n"
            f"and {runners.source}. Every job installs {installs},\n"
            f"and every dependency from the lock below by sha256"
            f"{' (emitted with uncommitted changes: --allow-dirty)' if dirty else ''}.\n"
            "Regenerate it after a pin or recipe change rather than editing it.")), end="")
        return 0
    if args.stage != "all":
        items = [e for e in items if (e.unit is not None) == (args.stage == "units")]
    print(render(items, args.format or "json"))
    return 0


def pinning(ref: str | None, repo: str | None) -> tuple[workflow.Pinning, tuple[str, ...]]:
    """The assemble the workflow installs, and the files this checkout changed but did not commit.
    No --assemble-repo: the repository the workflow runs in must be assemble's own checkout, and each job
    installs the checkout it runs on (the tag's). --assemble-repo: that repository at --assemble-ref,
    else at the commit this checkout is at."""
    from builder.release import workflow
    if repo is not None and not URL_RE.fullmatch(repo):
        raise AssembleError(f"{repo!r} is not a git URL", where="--assemble-repo",
                            fix="pass the https URL of the repository holding that commit")
    if ref is not None and not SHA_RE.fullmatch(ref):
        raise AssembleError(f"{ref!r} is not a full 40-hex commit", where="--assemble-ref",
                            fix="pin a commit (git rev-parse HEAD): a tag or branch can move")
    if ref is not None and repo is None:
        raise AssembleError("--assemble-ref names a commit of another repository, and no --assemble-repo names it",
                            where="--assemble-ref",
                            fix="add --assemble-repo URL, or drop --assemble-ref (from assemble's own checkout "
                                "each job installs the tag's checkout)")
    dirty: tuple[str, ...] = ()
    if ref is None:
        ref, dirty = _checkout_head()
    if repo is None and _git_top(Path.cwd()) != _git_top(CHECKOUT):
        raise AssembleError("the workflow would install assemble from the repository it runs in, and this "
                            "folder's repository is not assemble's own checkout", where="--assemble-repo",
                            fix=f"pass --assemble-repo URL, the repository that holds {ref} (or --assemble-ref "
                                "SHA, the commit of a published assemble's tag, with its --assemble-repo URL)")
    return workflow.Pinning(ref, repo), dirty


def _checkout_head() -> tuple[str, tuple[str, ...]]:
    """The commit this assemble's checkout is at, and the tracked files it changed since."""
    head = run_tool(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"]) if (CHECKOUT / ".git").exists() else None
    if head is None or head.returncode != 0 or not SHA_RE.fullmatch(head.stdout.strip()):
        raise AssembleError("this assemble is not a git checkout, so there is no commit to pin the workflow to",
                            where=str(CHECKOUT), fix="pass --assemble-ref SHA (and --assemble-repo URL)")
    status = run_tool(["git", "-C", str(CHECKOUT), "status", "--porcelain", "--untracked-files=no", "-z"])
    changed = tuple(sorted(entry[3:] for entry in status.stdout.split("\0") if len(entry) > 3))
    return head.stdout.strip(), changed


def _listed(files: tuple[str, ...], most: int = 5) -> str:
    return ", ".join(files[:most]) + (f" (+{len(files) - most} more)" if len(files) > most else "")


def _git_top(folder: Path) -> Path | None:
    """The top folder of the git work tree `folder` is in (None: in none)."""
    top = run_tool(["git", "-C", str(folder), "rev-parse", "--show-toplevel"])
    return Path(top.stdout.strip()).resolve() if top.returncode == 0 and top.stdout.strip() else None
