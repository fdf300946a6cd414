#!/usr/bin/env python3
"""A container unit on a real engine reaching a password-protected Redis cache through the relay.

    sudo python3 scripts/check-container-cache.py [--engine docker] [--out results.json]

What the tests cannot do on a machine without a container engine (docs/lab/2026-11-29-release.md, "Container
units"): the cpu recipe (one CPU level, llama-server) built as a container unit
(`--container debian-build`) by a real docker or podman, with `--network=none`, on "machine A"
and then on "machine B" (tests/support/remotecache.py's machines: other HOME, checkout path and
ccache), through a Redis that asks for a password. B's objects can only come through the relay's
socket: the container has no network and is given no password.

The image: no registry is needed. Debian 12 is debootstrapped (build-essential, ccache 4.7, ninja,
git, python3) with PyPI's CMake 4 in front (as the shipped CUDA image has it), imported as
`assemble-check/debian-build:bookworm`, and a copy of this project with
`containers/debian-build.Containerfile` (`FROM` that image) builds the unit, so the project's own
image tagging, mounts and engine command line are what runs (the copy runs with `python -S`: an
editable install's import hook would otherwise win over it). Needs root (debootstrap),
an engine that can run containers, and redis-server. Prints the counters; exits 1 when B's remote
hits are under 95% of its compiles.

Keep a run's numbers with --out docs/results/<machine>-<date>/check-container-cache.json, then run scripts/figures:
docs/figures.md, the one place figures are quoted, gets their rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.remotecache import build_on, machine, redis_server  # noqa: E402

BASE = "assemble-check/debian-build:bookworm"
TOOLS = "build-essential,ccache,cmake,ninja-build,git,python3,ca-certificates,pkg-config"
SMALL = '\n[cpu]\nvariants = "haswell"\n'
PASSWORD = "relay-check-pw"


def base_image(engine: str, mirror: str, work: Path) -> None:
    if subprocess.run([engine, "image", "inspect", BASE], capture_output=True).returncode == 0:
        return
    root = work / "rootfs"
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={TOOLS}", "bookworm", str(root), mirror],
                   check=True, stdout=subprocess.DEVNULL)
    # CMake >= 4 ahead of Debian's 3.25, as containers/cuda12.8-build.Containerfile does: only it writes
    # libllama's unity sources with relative includes (CMAKE_UNITY_BUILD_RELOCATABLE)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(root / "opt/cmake"),
                    "cmake>=4.0,<5"], check=True)
    (root / "usr/local/bin/cmake").symlink_to("/opt/cmake/cmake/data/bin/cmake")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run([engine, "import", "-", BASE], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
    if tar.wait() != 0:
        raise SystemExit("tar of the rootfs failed")
    shutil.rmtree(root)


def project_copy(into: Path) -> Path:
    """This project plus one Containerfile: what `assemble` stages as an image's build context."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("builder", "recipes", "patches", "containers"):
        shutil.copytree(REPO / part, into / part, ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", into / "pyproject.toml")
    (into / "containers" / "debian-build.Containerfile").write_text(
        f"# scripts/check-container-cache.py: Debian 12's compilers, ccache 4.7, CMake 4, ninja\nFROM {BASE}\n")
    return into


def project_cli(project: Path):
    """tests.support.common.assemble for the project copy: `-S` skips the .pth files, among them an
    editable install's import hook, which would otherwise win over PYTHONPATH."""
    site = [p for p in sys.path if p.endswith("site-packages")]

    def cli(*args: str, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        full = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(project), *site])}
        return subprocess.run([sys.executable, "-S", "-m", "builder", *args], cwd=cwd, env=full,
                              capture_output=True, text=True, timeout=timeout)
    return cli


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="docker")
    ap.add_argument("--mirror", default="http://deb.debian.org/debian")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    engine = shutil.which(args.engine) or sys.exit(f"{args.engine} not found")
    with tempfile.TemporaryDirectory(prefix="check-container-cache-") as tmp:
        root = Path(tmp)
        base_image(engine, args.mirror, root)
        project = project_copy(root / "project")
        with redis_server(root / "redis", password=PASSWORD) as url:
            url = url.replace("redis://", f"redis://:{PASSWORD}@")
            a, b = machine(root, "a", extra=SMALL), machine(root, "b", extra=SMALL)
            build = ("--container", "debian-build", "--target", "llama-server")
            via = {"env": {"ASSEMBLE_CONTAINER_ENGINE": engine}, "cli": project_cli(project)}
            cold, stats_a, log_a = build_on(a, url, *build, **via)
            shutil.rmtree(a.home)
            warm, stats_b, log_b = build_on(b, url, *build, **via)
    for line in (log_a + log_b).splitlines():
        if "remote" in line or "compile cache" in line or "container" in line:
            print("  log:", line.strip())
    version = subprocess.run([engine, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"engine: {engine} ({version})")
    print(f"  A, cold, in the container:      {cold:7.1f} s   {stats_a}")
    print(f"  B, remote cache through relay:  {warm:7.1f} s   {stats_b}")
    if args.out:
        args.out.write_text(json.dumps({"engine": engine, "engine_version": version, "cores": os.cpu_count(),
                                        "cold_seconds": cold, "warm_seconds": warm, "a": stats_a, "b": stats_b}, indent=1))
    ok = stats_b["compiles"] > 0 and stats_b["remote_hits"] >= 0.95 * stats_b["compiles"]
    print("PASS" if ok else "FAIL: machine B's compiles did not come from the remote cache")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
