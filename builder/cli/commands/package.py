"""assemble package: a runtime folder -> deterministic archive, SBOM and SHA256SUMS."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from builder.cli.args import Subparsers
from builder.release.package import DEFAULT_FORMAT, FORMATS, WINDOWS_FORMAT, package


def register(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("package", parents=[common], help="archive a runtime for release (tar + SBOM + SHA256SUMS)",
                       description="Write runtime-<recipe>[-<bNNNN>][-<toolkit>]-<sha12>-linux-<arch>.<ext> (e.g. "
                       "runtime-cuda-vulkan-b7416-cuda12.8-0c1e57098bba-linux-x86_64.tar.zst): a byte-reproducible "
                       "archive of a runtime folder (sorted entries, the pinned commit's date as every mtime, uid/gid "
                       "0), a CycloneDX SBOM and an in-toto/SLSA provenance statement beside it, and their lines in "
                       "SHA256SUMS.",
                       epilog="examples:\n  assemble package runtime-cpu\n"
                       "  assemble package runtime-cuda --format tar.gz --out-dir dist\n"
                       "  assemble package runtime-vulkan --with-tests   # tests/test-backend-ops goes in too\n"
                       "  cd dist && sha256sum -c SHA256SUMS\n"
                       "refuses (nothing written): a runtime that fails any check of verify --static (exit 1, "
                       "verify's lines), a file in --out-dir with an output's name that no run of package wrote "
                       "(exit 2)\n"
                       "exit status: 0 written, 1 the runtime fails verify --static or the disk is full, 2 bad input",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runtime", metavar="RUNTIME_DIR", help="the runtime folder (runtime-<recipe>/)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help=f"archive format (default {DEFAULT_FORMAT}: multi-threaded zstd; tar.gz for old tools; "
                        f"{WINDOWS_FORMAT}, the only one, for a Windows runtime)")
    p.add_argument("--out-dir", metavar="DIR", default="dist",
                   help="where the archive, SBOM and SHA256SUMS go (default ./dist; other archives' sums are kept; "
                   "never inside the runtime; only files an earlier package run wrote there are replaced)")
    p.add_argument("--with-tests", action="store_true",
                   help="put the runtime's tests/ (test-backend-ops, for verify --ops on the target host) in the "
                   "archive; by default it is left out, so a release archive does not grow by it")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = package(Path(args.runtime), Path(args.out_dir), args.format, with_tests=args.with_tests)
    if args.json:
        print(json.dumps({"archive": str(result.archive), "sha256": result.sha256, "size": result.size,
                          "sbom": str(result.sbom), "provenance": str(result.provenance),
                          "sums": str(result.sums)}, indent=2))
    else:
        print(result.archive)
    return 0
