"""assemble repair: prebuilt llama.cpp (build folders, release archives, .deb packages) -> verified runtime."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from builder.cli.args import Subparsers, env_pairs, lib_dirs
from builder.cli.result import print_runtime
from builder.config.targets import GfxTarget
from builder.errors import AssembleError
from builder.prebuilt.request import RepairRequest
from builder.runtime.layout import runtime_dir_name
from builder.windows import FOLDER_SUFFIX, PLATFORM


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("repair", parents=[common], help="turn prebuilt llama.cpp into a verified runtime",
                       description="Read prebuilt llama.cpp -- a CMake build folder, a release archive (.tar.gz, "
                       ".zip, ...) or .deb packages -- find its executables, ggml base, libraries and backend "
                       "modules, bundle what they need into a relocatable runtime-<name>/ (DT_RPATH $ORIGIN, "
                       "vendor data at its depth, a manifest naming every input with its sha256) and verify it. "
                       "Several inputs of one build merge into one runtime (one ggml base, each input's "
                       "backends; a later input may hold backend modules only); inputs with different ggml bases "
                       "are refused before anything is copied. Every file of an input that is llama.cpp's is "
                       "carried or listed as left out with the reason (--dry-run, the log, the manifest); a "
                       "damaged, foreign or escaping module or executable, or a missing CPU level, is refused "
                       "unless --without names it. "
                       "Windows release zips (llama-bNNNN-bin-win-*-x64.zip, cudart-*.zip) give a flat "
                       "runtime-<name>-windows-x64/ folder, its DLL closure read from the PE import tables.",
                       epilog="examples:\n"
                       "  assemble repair build-dual                                   # a CMake build folder\n"
                       "  assemble repair llama-bNNNN-bin-ubuntu-cuda-12.8-x64.tar.gz llama-bNNNN-bin-ubuntu-"
                       "vulkan-x64.tar.gz --name cuda-vulkan \\\n"
                       "      --lib-path cudart-llama-bNNNN-bin-ubuntu-cuda-12.8-x64   # upstream's cudart-*.tar.gz "
                       "unpacked: cudart and cuBLAS ship apart\n"
                       "  assemble repair libggml0_*.deb libggml0-backend-vulkan_*.deb libllama0_*.deb "
                       "llama.cpp-tools_*.deb --name debian-vulkan\n"
                       "  assemble repair llama-b7416-bin-win-cuda-12.4-x64.zip cudart-llama-bin-win-cuda-12.4-x64.zip "
                       "llama-b7416-bin-win-vulkan-x64.zip --name cuda-vulkan-b7416   # Windows\n"
                       "  assemble repair build-dual --dry-run                         # what it would carry\n"
                       "inputs are read-only: an --out that is, holds or lies inside an input or --lib-path folder "
                       "is refused, --keep never deletes one, and /, system folders, the home and the cache are "
                       "refused as inputs\n"
                       "exit status: 0 runtime ready (or --dry-run passed), 1 verification failed (or the disk is "
                       "full), 2 bad input (a missing library, a bad archive, different ggml bases...), "
                       "130 interrupted",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="a build folder, a release archive, or .deb files")
    p.add_argument("--name", help="the runtime's name (default: the first input's, e.g. build-dual)")
    p.add_argument("--out", metavar="DIR", help="output folder (default: ./runtime-<name>), with the rules of build --out")
    p.add_argument("--lib-path", action="append", default=[], metavar="DIR",
                   help="also take vendor libraries from DIR (e.g. cuBLAS from NVIDIA's wheel), never llama.cpp's own "
                        "(libggml*, libllama*: they come from the inputs); repeatable")
    p.add_argument("--target", action="append", default=[], metavar="NAME",
                   help="carry only this executable (default: every llama-* found); repeatable")
    p.add_argument("--without", action="append", default=[], metavar="NAME",
                   help="leave out this executable or backend module (file name, e.g. libggml-cpu-x64.so) on "
                        "purpose: a damaged, foreign or missing one is otherwise refused; listed as left out; "
                        "repeatable")
    p.add_argument("--hip-target", action="append", default=[], metavar="GFX",
                   help="also check rocBLAS/hipBLASLt data and HIP code for this card's arch; repeatable")
    p.add_argument("--check-env", action="append", default=[], metavar="NAME=VALUE",
                   help="variable for the device checks' otherwise empty environment; repeatable")
    p.add_argument("--verify-static", action="store_true", help="verify by reading files only (a runtime for "
                   "another host, e.g. one needing a newer glibc)")
    p.add_argument("--accept-loader-risk", metavar="REASON",
                   help="a prebuilt ggml that searches a compiled-in folder or the working directory for modules "
                        "(it cannot be patched) then passes verify with a warning; REASON goes into the manifest")
    p.add_argument("--dry-run", action="store_true", help="print what was found, what would be carried and what "
                   "is left to the host, then run the real run's checks on a copy in a scratch folder and exit as "
                   "the real run would (2 refused, 1 a check failed); --out is never written")
    p.add_argument("--keep", type=int, metavar="N", help="as for build: runtimes moved aside beyond the newest N are deleted")
    p.add_argument("--no-wait", action="store_true", help="fail instead of waiting when another run holds the output")
    p.set_defaults(func=run)


def default_name(first: str) -> str:
    """build-dual -> build-dual; llama-b7416-bin-ubuntu-x64.tar.gz -> llama-b7416-bin-ubuntu-x64; a .deb -> its package."""
    stem = Path(first.rstrip("/")).name
    stem = re.sub(r"(\.tar\.(gz|xz|zst|bz2)|\.tgz|\.zip)$", "", stem)
    stem = stem.split("_", 1)[0] if stem.endswith(".deb") else stem
    stem = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "repaired"
    return stem


def run(args: argparse.Namespace) -> int:
    from builder.flows import publish, repair

    if args.keep is not None and args.keep < 0:
        raise AssembleError("--keep must be 0 or more", fix="write e.g. --keep 3")
    if args.accept_loader_risk is not None and not args.accept_loader_risk.strip():
        raise AssembleError("--accept-loader-risk needs a reason", fix='write e.g. --accept-loader-risk "a container '
                            'image without other ggml packages"')
    targets = tuple(GfxTarget.parse(g, "--hip-target") for g in args.hip_target)
    name = args.name or default_name(args.inputs[0])
    publish.check_inputs(args.inputs)   # before platform_of lists what is in them
    platform = repair.platform_of(tuple(args.inputs))
    out = Path(args.out) if args.out else Path.cwd() / (runtime_dir_name(name)
                                                        + (FOLDER_SUFFIX if platform == PLATFORM else ""))
    req = RepairRequest(inputs=tuple(args.inputs), name=name, out=out, lib_paths=lib_dirs(args.lib_path),
                        targets=tuple(args.target), without=tuple(args.without), hip_targets=targets,
                        check_env=env_pairs(args.check_env),
                        verify_static=args.verify_static, accept_loader_risk=args.accept_loader_risk,
                        dry_run=args.dry_run, keep=args.keep, wait=not args.no_wait)
    result = repair.repair(req, repair.PLATFORMS[platform])
    if result is not None:
        print_runtime(result, args.json)
    return 0
