"""`assemble image RUNTIME_DIR`: a container image around a built runtime."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from builder import ui
from builder.cli.args import Subparsers
from builder.release import image
from builder.toolchain import container


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("image", parents=[common], help="build a container image from a runtime folder",
                              description="Build an image from containers/runtime.Containerfile: a slim base plus "
                                          "the runtime folder, llama-server as entrypoint, a /health check.",
                              epilog="examples:\n  assemble image runtime-cuda-vulkan --tag llm/runtime:cuda-vulkan\n"
                                     "  assemble image runtime-cpu --engine podman --dry-run",
                              formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("runtime", metavar="RUNTIME_DIR", type=Path, help="a folder made by `assemble build`")
    p.add_argument("--engine", metavar="ENGINE", default="auto",
                   help="docker, podman or a path (default: $ASSEMBLE_CONTAINER_ENGINE, else podman, else docker)")
    p.add_argument("--tag", help="image name:tag (default: llama-<recipe>:<sha12>)")
    p.add_argument("--base", metavar="IMAGE",
                   help=f"base image (default: {image.RUNTIME_BASE}; the runtime's glibc needs are checked "
                        "against it only for the default)")
    p.add_argument("--with-tests", action="store_true",
                   help="put the runtime's tests/ (test-backend-ops, for verify --ops) in the image; left out by default")
    p.add_argument("--dry-run", action="store_true", help="print the engine command instead of running it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine = container.find_engine(args.engine)
    plan = image.plan_image(args.runtime, engine=engine, tag=args.tag, base=args.base, with_tests=args.with_tests)
    if args.dry_run:
        print(json.dumps(list(plan.argv)) if args.json else shlex.join(plan.argv))   # a command a shell can run
        if plan.left_out:
            ui.info(f"the build runs in a copy of the context without {', '.join(d + '/' for d in plan.left_out)} "
                    "(--with-tests puts it in)")
        return 0
    tag = image.build_image(plan)
    print(json.dumps({"tag": tag, "runtime": str(plan.runtime)}) if args.json else tag)
    return 0
