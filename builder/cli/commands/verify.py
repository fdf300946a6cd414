"""assemble verify: static and dynamic checks of a runtime folder."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from builder.cli.args import Subparsers, env_pairs
from builder.config.targets import CudaArch, GfxTarget
from builder.errors import AssembleError


def looks_like_runtime(folder: Path) -> bool:
    """Two lstat calls, never a walk: `verify /` is refused at once. A runtime that lost only its
    manifest.json still qualifies (and then fails verify)."""
    return os.path.lexists(folder / "manifest.json") or os.path.lexists(folder / "bin" / "llama-server")


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("verify", parents=[common], help="prove a runtime works on this host",
                       description="Check a runtime folder: manifest hashes, ELF closure and RPATHs, backend "
                       "modules, devices, and with --smoke a real completion per device.",
                       epilog="examples:\n  assemble verify runtime-cpu\n  assemble verify runtime-vulkan --smoke "
                       "--check-env GGML_VK_VISIBLE_DEVICES=0\n  assemble verify runtime-cuda-vulkan --cuda-arch 75,89\n"
                       "  assemble verify runtime-cuda-vulkan --ops\n  assemble verify runtime-vulkan --ops SCALE,ADD "
                       "--check-env GGML_VK_VISIBLE_DEVICES=0\n"
                       "  assemble verify /opt/runtime --json\n"
                       "  assemble verify runtime-cpu --static --provenance STEM.intoto.json --sha256sums SHA256SUMS\n"
                       "exit status: 0 all checks passed, 1 a check failed, 2 usage error",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runtime", help="the runtime folder (runtime-<recipe>/)")
    p.add_argument("--smoke", action="store_true", help="start llama-server per device and send a real request")
    p.add_argument("--ops", nargs="?", const="", default=None, metavar="LIST",
                   help="run the runtime's tests/test-backend-ops on every GPU device against the CPU backend: "
                        "every case of these ops (comma-separated); alone: the cases a text model's inference runs "
                        "of the default op list; a failing case runs again, alone, and fails the device only when it "
                        "fails again in half of its re-runs; the last result per device is kept in ops-checks.json")
    p.add_argument("--model", metavar="FILE", help="GGUF model for --smoke (default: a tiny random one)")
    p.add_argument("--check-env", action="append", default=[], metavar="NAME=VALUE",
                   help="variable added to the otherwise empty environment of the checks; repeatable")
    p.add_argument("--static", action="store_true", help="read files only, run nothing: for a runtime meant for "
                   "another host (an older glibc here is then a warning)")
    p.add_argument("--hip-target", action="append", default=[], metavar="GFX",
                   help="also check rocBLAS/hipBLASLt data and HIP code for this card's arch; repeatable")
    p.add_argument("--cuda-arch", action="append", default=[], metavar="ARCH",
                   help="also check that the CUDA module has SASS or usable PTX for this compute capability "
                        "(e.g. 89 for an RTX 4090, 75 for a T4); repeatable or comma-separated")
    p.add_argument("--provenance", metavar="FILE", help="also check manifest.json and every file against the "
                   "release's <stem>.intoto.json (a runtime unpacked from a release archive), and each of its claims "
                   "(commit, recipe, backends, glibc promise, units, ...) against manifest.json")
    p.add_argument("--sha256sums", metavar="FILE", help="with --provenance: the release's SHA256SUMS must list that "
                   "provenance file, its archive and its SBOM with the same digests, and the files beside it must match")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from builder.check.verify import render, verify_runtime

    targets = tuple(str(GfxTarget.parse(gfx, "--hip-target")) for gfx in args.hip_target)   # arguments first
    archs = tuple(a for text in args.cuda_arch for a in CudaArch.parse_list(text, "--cuda-arch"))
    runtime = Path(args.runtime)
    if not runtime.is_dir():
        raise AssembleError("no such runtime folder", where=str(runtime), fix="give the path of a runtime-<recipe>/ folder")
    if not looks_like_runtime(runtime):
        raise AssembleError("not a runtime folder: it has neither manifest.json nor bin/llama-server", where=str(runtime),
                            fix="give the path of a runtime-<recipe>/ folder made by assemble build")
    model = Path(args.model) if args.model else None
    if model is not None and not model.is_file():
        raise AssembleError("no such model file", where=str(model), fix="give a .gguf file, or drop --model")
    if args.static and args.smoke:
        raise AssembleError("--static runs nothing, --smoke runs the server", fix="pick one")
    if args.static and args.ops is not None:
        raise AssembleError("--static runs nothing, --ops runs tests/test-backend-ops on the devices", fix="pick one")
    ops = None
    if args.ops is not None:
        from builder.check.ops import DEFAULT_SELECTION, Selection, parse_op_list
        ops = Selection(parse_op_list(args.ops)) if args.ops else DEFAULT_SELECTION
    released = sums = None
    if args.sha256sums and not args.provenance:
        raise AssembleError("--sha256sums checks the release's provenance file against SHA256SUMS: it needs "
                            "--provenance", fix="add --provenance <stem>.intoto.json from the same release")
    if args.provenance:                   # read before any check runs: a bad file is refused at once
        from builder.release import attested
        released = attested.load_provenance(args.provenance)
        sums = attested.load_sums(args.sha256sums) if args.sha256sums else None
    report = verify_runtime(runtime, smoke=args.smoke, model=model, extra_env=dict(env_pairs(args.check_env)),
                            static=args.static, hip_targets=targets, cuda_archs=archs, ops=ops)
    if released is not None:
        extra = attested.provenance_checks(runtime, released)
        if sums is not None:
            extra.append(attested.sums_check(Path(args.sha256sums), sums, released))
        report = dataclasses.replace(report, checks=report.checks + tuple(extra))
    render(report, as_json=args.json)
    return 0 if report.passed else 1
