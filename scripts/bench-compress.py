#!/usr/bin/env python3
"""Compress time and size of one runtime's release archive: gzip against zstd, at several levels.

    python3 scripts/bench-compress.py RUNTIME_DIR [--gzip 1,6,9] [--zstd 3,10,15] [--out results.json]

Each run writes the archive `assemble package` writes (the same tar stream: sorted entries, fixed
mtime, normalised modes), with the compressor at one level, to a temporary file on the same file
system, and times it end to end (read, tar, compress, write, fsync). zstd runs with a thread per
core, as `assemble package` does. The level `package` uses is marked.

Keep a run's numbers with --out docs/results/<machine>-<date>/bench-compress.json, then run scripts/figures:
docs/figures.md, the one place figures are quoted, gets their rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from builder.release import package  # noqa: E402
from builder.runtime.manifest import Manifest  # noqa: E402


def _levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runtime", type=Path)
    ap.add_argument("--gzip", default="1,6,9")
    ap.add_argument("--zstd", default="3,10,15")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    m = Manifest.load(args.runtime)
    raw = sum(f.size for f in m.files)
    mtime = package.epoch_for(m)
    rows = []
    defaults = {"tar.gz": package._GZIP_LEVEL, "tar.zst": package._ZSTD_LEVEL}
    for fmt, levels, attr in (("tar.zst", _levels(args.zstd), "_ZSTD_LEVEL"), ("tar.gz", _levels(args.gzip), "_GZIP_LEVEL")):
        for level in levels:
            setattr(package, attr, level)
            with tempfile.TemporaryDirectory(prefix="bench-compress-", dir=args.runtime.parent) as tmp:
                dest = Path(tmp) / f"a.{fmt}"
                os.sync()
                t0 = time.monotonic()
                _, size = package.write_archive(args.runtime, dest, fmt, mtime, top=args.runtime.name)
                took = time.monotonic() - t0
            rows.append({"format": fmt, "level": level, "seconds": round(took, 1), "bytes": size,
                         "ratio": round(raw / size, 3), "mb_per_s": round(raw / took / 1e6, 1),
                         "default": level == defaults[fmt]})
            r = rows[-1]
            print(f"  {fmt:<8} level {level:>2}{' (default)' if r['default'] else '          '}  {took:7.1f} s  "
                  f"{size / 2**20:9.1f} MiB  ratio {r['ratio']:.2f}  {r['mb_per_s']:6.1f} MB/s", flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    print(f"runtime {args.runtime.name}: {len(m.files)} files, {raw / 2**30:.2f} GiB; {cpu} ({os.cpu_count()} cores)")
    if args.out:
        args.out.write_text(json.dumps({"runtime": args.runtime.name, "bytes": raw, "cpu": cpu,
                                        "cores": os.cpu_count(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
