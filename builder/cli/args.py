"""Options shared by the commands that plan a build (build, show, doctor, fetch), parsed into the
command line's step of the configuration cascade (builder.config.options.CliOptions)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, TypeAlias

from builder.config.options import LAUNCHERS, CliOptions
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError
from builder.toolchain import container

EXAMPLES = """examples:
  assemble build --recipe cpu
  assemble build --recipe cuda-vulkan --cuda-arch 90 --out /opt/llm/runtime-cuda-vulkan
  assemble build --recipe rocm --rocm-path /opt/rocm-6.4 --hip-target gfx1100
  assemble build --recipe vulkan --check-env GGML_VK_VISIBLE_DEVICES=0   (CPU Vulkan driver)"""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what main() hands each command's register(): argparse's subparsers object (its class is private)
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_recipe(p: argparse.ArgumentParser, *, required: bool = True, many: bool = False, what: str = "") -> None:
    """The recipe, spelled NAME or --recipe NAME (every command that takes one takes both); after
    parsing, settle_recipe leaves it in args.recipe (a list with many=True)."""
    text = "recipe name, alias or path to a .toml file" + (what and f" ({what})")
    p.add_argument("recipe_positional", nargs="*" if many else "?", metavar="NAME", help=text)
    p.add_argument("--recipe", dest="recipe_option", action="append", default=[], metavar="NAME",
                   help=("the same, as an option" + ("; repeatable" if many else "")))
    p.set_defaults(recipe_rule=(required, many, p.prog))     # p.prog: "assemble build"


def settle_recipe(args: argparse.Namespace) -> None:
    """args.recipe from NAME or --recipe NAME; both spellings, or two different names, are refused."""
    if not hasattr(args, "recipe_rule"):
        return
    required, many, prog = args.recipe_rule
    command = prog.split()[-1]
    given = args.recipe_positional if many else [args.recipe_positional] if args.recipe_positional else []
    option = args.recipe_option
    del args.recipe_rule, args.recipe_positional, args.recipe_option
    if given and option:
        raise AssembleError(f"the recipe is given twice: as NAME ({', '.join(given)}) and as --recipe "
                            f"({', '.join(option)})", fix=f"write either `assemble {command} NAME` or "
                            f"`assemble {command} --recipe NAME`")
    names = given or option
    if not many and len(set(names)) > 1:
        raise AssembleError(f"two recipes given ({', '.join(dict.fromkeys(names))}); {command} takes one",
                            fix=f"give one: `assemble {command} NAME` (or --recipe NAME)")
    if required and not names:
        raise AssembleError(f"{command} needs a recipe: `assemble {command} NAME` or --recipe NAME",
                            fix=f"see `assemble {command} --help`; `assemble list` shows the recipes")
    args.recipe = names if many else (names[0] if names else None)


def add_plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", metavar="DIR", help="build this local llama.cpp checkout instead of the pinned mirrors")
    p.add_argument("--mirror", action="append", default=[], metavar="URL|DIR",
                   help="a git mirror tried before the recipe's own (a URL, or a local repository); repeatable")
    p.add_argument("--cuda-arch", metavar="LIST", help="CUDA architectures, replacing the recipe's (e.g. 90 or 90,120)")
    add_toolkit_options(p)
    p.add_argument("--hip-target", metavar="GFX", help="the one gfx arch to build HIP for, replacing the recipe's")
    p.add_argument("-D", "--define", action="append", default=[], metavar="KEY=VALUE",
                   help="extra CMake definition (wins over the recipe); repeatable")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="build target instead of the recipe's list; repeatable")
    p.add_argument("-j", "--jobs", type=int, metavar="N",
                   help="parallel compile jobs (default: $CMAKE_BUILD_PARALLEL_LEVEL, else all cores)")
    p.add_argument("--launcher", choices=LAUNCHERS, default="auto",
                   help="compiler launcher (default auto: ccache or sccache when installed)")
    p.add_argument("--remote-cache", metavar="URL",
                   help="compile cache shared across machines (default $ASSEMBLE_REMOTE_CACHE): ccache takes "
                        "redis://, redis+unix:, http://; sccache redis://, s3://, gs://, gha")
    p.add_argument("--container", metavar="NAME",
                   help=f"build units that name no container in this one ({', '.join(container.available())}); "
                        "'none' builds every unit on the host")
    p.add_argument("--engine", metavar="ENGINE", default="auto",
                   help="docker, podman or a path (default: $ASSEMBLE_CONTAINER_ENGINE, else podman, else docker)")
    p.add_argument("--patch", action="append", default=[], metavar="NAME",
                   help="apply this opt-in patch from patches/ (e.g. cuda-fa-blackwell-exempt); repeatable")
    p.add_argument("--accept-blackwell-regression", action="store_true",
                   help="build CUDA >= 13 for sm_120/121 anyway; the 50-80%% long-context slowdown is recorded")


def add_toolkit_options(p: argparse.ArgumentParser) -> None:
    """Where the GPU toolkits are: `doctor` takes these too, and resolves them the same way."""
    p.add_argument("--cuda-root", metavar="DIR",
                   help="CUDA toolkit to use (else CUDAToolkit_ROOT, CUDA_PATH, CUDA_HOME, nvcc on PATH)")
    p.add_argument("--rocm-path", metavar="DIR", help="ROCm tree to use (else ROCM_PATH, HIP_PATH, hipconfig, /opt/rocm)")


def defines(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _NAME.fullmatch(key):
            raise AssembleError(f"--define {item!r} is not KEY=VALUE", fix="write e.g. -D GGML_CUDA_NCCL=OFF")
        out.append((key, value))
    return tuple(out)


def env_pairs(items: list[str], flag: str = "--check-env") -> tuple[tuple[str, str], ...]:
    """NAME=VALUE pairs for an environment: NAME a variable name, never empty."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not _NAME.fullmatch(key):
            raise AssembleError(f"{flag} {item!r} is not NAME=VALUE", where=flag,
                                fix="write e.g. --check-env GGML_VK_VISIBLE_DEVICES=0")
        out[key] = value
    return tuple(out.items())


def lib_dirs(given: list[str]) -> tuple[Path, ...]:
    """--lib-path folders, resolved: a typo fails at once, before anything is read or compiled."""
    out = []
    for d in given:
        folder = Path(d).expanduser()
        if not folder.is_dir():
            raise AssembleError("no such folder", where=f"--lib-path {d}",
                                fix="name a folder holding shared libraries (e.g. a wheel's nvidia/cublas/lib)")
        out.append(folder.resolve())
    return tuple(out)


def cli_options(args: argparse.Namespace, **extra: Any) -> CliOptions:
    """The plan options of `args` (what add_plan_options added), validated: one line on bad input."""
    if args.jobs is not None and args.jobs < 1:
        raise AssembleError("--jobs must be at least 1", where="--jobs", fix="write e.g. -j 8")
    return CliOptions(
        source=args.source, mirrors=tuple(args.mirror),
        cuda_archs=CudaArch.parse_list(args.cuda_arch, "--cuda-arch") if args.cuda_arch is not None else (),
        cuda_root=args.cuda_root, rocm_path=args.rocm_path,
        hip_target=GfxTarget.parse(args.hip_target, "--hip-target") if args.hip_target is not None else None,
        defines=defines(args.define), targets=tuple(args.target), jobs=args.jobs, launcher=args.launcher,
        container=args.container, engine=args.engine, patches=tuple(args.patch),
        accept_blackwell_regression=args.accept_blackwell_regression, remote_cache=args.remote_cache, **extra)
