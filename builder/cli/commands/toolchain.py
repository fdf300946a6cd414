"""`assemble toolchain cuda VERSION`: lay out a CUDA toolkit from NVIDIA's redist archives."""

from __future__ import annotations

import argparse
import json

from builder.cli.args import Subparsers
from builder.toolchain import provision


def register(subparsers: Subparsers, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("toolchain", parents=[common], help="provision a toolkit into the cache",
                              description="Download, verify and lay out a toolkit in the cache; print its root.",
                              epilog="examples:\n  assemble toolchain cuda 12.8.1\n"
                                     "  assemble build --recipe cuda --cuda-root \"$(assemble toolchain cuda 12.8.1 -q)\"",
                              formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    cuda = kinds.add_parser("cuda", parents=[common], help="a CUDA toolkit from NVIDIA's redistributable archives",
                            description="Fetch the components a llama.cpp build needs from redistrib_VERSION.json, "
                                        "check every sha256, and print a root usable as --cuda-root / "
                                        "CUDAToolkit_ROOT. Running it again is a no-op; an interrupted download "
                                        "resumes.")
    cuda.add_argument("version", metavar="VERSION", help="a CUDA release, e.g. 12.8.1")
    cuda.add_argument("--components", nargs="+", metavar="NAME", action="extend",
                      help=f"redistrib components (default: {', '.join(provision.REQUIRED)}, plus "
                           f"{', '.join(provision.IF_PRESENT)} where the release has them)")
    cuda.add_argument("--base-url", metavar="URL",
                      help=f"redist folder holding redistrib_VERSION.json (default: ${provision.BASE_URL_ENV} "
                           f"or {provision.DEFAULT_BASE_URL})")
    cuda.add_argument("--platform", metavar="NAME", choices=sorted(provision.TARGET_DIRS),
                      help=f"archive platform (default: this host's, {provision.host_platform()})")
    cuda.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Both "--components a b" and "--components a,b" read the same.
    comps = tuple(c for item in args.components for c in item.split(",") if c) if args.components else None
    tk = provision.ensure_cuda(args.version, comps, url=args.base_url, plat=args.platform)
    print(json.dumps(tk.as_dict(), indent=2) if args.json else tk.root)
    return 0
