"""Run one planned unit: on this host, or inside its container image.

Both run the plan's own configure and build command lines (builder.units.plan rendered them
for the host's tools or the image's); the container run wraps them in the engine's `run`
with the source, cache and build folders mounted at the paths they have here, so the build
tree that comes out names real host paths and the host's collect, merge and bundle steps
read it exactly as they read a host build. A finished unit leaves a stamp: the next build
with the same plan and an untouched bin/ does not run CMake at all.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import locks, ui
from builder.units import cacherelay, cachestats, sccacheserver
from builder.units.cacherelay import Relay
from builder.units.plan import UnitPlan
from builder.config import remotecache
from builder.errors import AssembleError, BuildFailed
from builder.paths import cache_dir
from builder.proc import command_line, run_logged
from builder.toolchain import container, toolstore
from builder.toolchain.container import Engine

BUILT_STAMP = "assemble-built.json"    # a finished build: what it was built from, and what it left in bin/
CONFIGURED_STAMP = "assemble-configured.json"
CONTAINER_RECORD = "assemble-container.json"
LOG = "assemble-build.log"
_FIX = "read the log above; a missing toolchain shows in `assemble doctor`"


# --- the container form of a plan ----------------------------------------------------------

@dataclass(frozen=True)
class UnitRun:
    """One unit's build in a container, fully decided (the engine only has to run it)."""
    unit: str
    container: str                  # Containerfile name, e.g. cuda12.8-build
    engine: Engine
    image: str                      # content-addressed tag of that Containerfile + project
    build_dir: Path
    cache: Path
    script: str                     # what runs inside (sh -c)
    argv: tuple[str, ...]           # the engine command line
    expect: tuple[str, ...]         # paths under build_dir that must exist afterwards

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "container": self.container, "engine": self.engine.as_dict(),
                "image": self.image, "argv": list(self.argv), "script": self.script}


def expected_outputs(plan: UnitPlan) -> tuple[str, ...]:
    """What a finished unit leaves in its build tree (modules only exist with GGML_BACKEND_DL)."""
    out = ["CMakeCache.txt"] + [f"bin/{t}" for t in plan.targets]
    if dict(plan.defines).get("GGML_BACKEND_DL") == "ON":
        out += [f"bin/libggml-{b}.so" for b in plan.unit.backends if b != "cpu"] + ["bin/libggml-cpu*.so"]
    return tuple(out)


def container_run(plan: UnitPlan, engine: Engine, *, image: str | None = None,
                  uid_gid: tuple[int, int] | None = None, relay: Relay | None = None) -> UnitRun:
    """The engine command that runs `plan` in its unit's image. Refuses (exit 2) a define naming a
    host path the container cannot see, before anything runs. With an open `relay`, its folder is
    mounted and the container's ccache uses the remote cache through it (and through nothing else)."""
    name = plan.unit.where.image_name()
    where = f"unit {plan.unit.name} (container {name})"
    container.containerfile(name)   # unknown names fail here, before anything runs
    source, build_dir, cache = plan.source_dir.resolve(), plan.build_dir.resolve(), cache_dir().resolve()
    if not (source / "CMakeLists.txt").is_file():
        raise AssembleError("not a llama.cpp source tree (no CMakeLists.txt)", where=str(source),
                            fix="pass the prepared source tree of the pinned sha")
    mounted = (source, build_dir, cache)
    for key, value in plan.unit.cmake_defines():
        for part in value.split(";"):
            if part.startswith("/") and not any(_inside(Path(part), m) for m in mounted):
                raise AssembleError(f"-D{key} names the host path {part}, which the container cannot see",
                                    where=where, fix="drop that define for container units, or build the unit "
                                                     "on the host (--container none)")
    script = f"set -eu\n{command_line(plan.configure)}\n{command_line(plan.build)}\n"
    env = {"HOME": "/tmp", "CCACHE_DIR": str(cache / "ccache" / name), "CCACHE_BASEDIR": str(cache),
           "CCACHE_STATSLOG": str(build_dir / cachestats.STATS_LOG),
           # the source is owned by another uid inside: let llama.cpp's build-info read its git sha
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
           "NINJA_STATUS": "[%f/%t] ", **dict(plan.env)}
    mounts: tuple[tuple[Path, bool], ...] = ((cache, False), (source, True), (build_dir, False))
    if relay is not None:                                        # no password: the relay logs in
        env.update(remotecache.remote_env(relay.container_cache, "ccache"))
        mounts += ((relay.socket_path.parent, False),)
    image = image or container.image_tag(name)
    argv = container.run_argv(engine, image, script, mounts=mounts, env=env, workdir=build_dir, uid_gid=uid_gid)
    return UnitRun(plan.unit.name, name, engine, image, build_dir, cache, script, argv, expected_outputs(plan))


def _inside(p: Path, root: Path) -> bool:
    try:
        p.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def run_container(run: UnitRun) -> Path:
    """Build the image if needed, run the unit in it, check its build tree came out; returns build_dir."""
    tag = container.ensure_image(run.engine, run.container)
    if tag != run.image:
        raise BuildFailed(f"image {tag} is not the planned {run.image}", where=f"unit {run.unit}",
                          fix="the project or Containerfile changed during the build; run again")
    run.build_dir.mkdir(parents=True, exist_ok=True)
    (run.cache / "ccache" / run.container).mkdir(parents=True, exist_ok=True)
    log = run.build_dir / LOG
    ui.step(f"build {run.unit} in container {run.container} ({run.engine.kind})")
    run_logged(run.argv, log, f"unit {run.unit} in {run.container}", fix=f"read {log}; the exact command is in it",
               progress=True)
    missing = [e for e in run.expect if not list(run.build_dir.glob(e))]
    if missing:
        raise BuildFailed(f"the container finished but the build tree lacks {', '.join(missing)}",
                          where=str(run.build_dir), fix=f"read {log}; check the unit's targets and backends")
    (run.build_dir / CONTAINER_RECORD).write_text(json.dumps(run.as_dict(), indent=1))
    return run.build_dir


# --- on this host ---------------------------------------------------------------------------

def run_unit(plan: UnitPlan, engine: Engine | None = None) -> Path:
    """Configure (once per build folder) and build, here or in the unit's container (`engine`
    given); returns the build folder. A unit whose stamp shows nothing changed (same plan,
    same toolchain files, bin/ as left) is not touched at all."""
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    with locks.exclusive(plan.build_dir / ".assemble.lock",
                         f"waiting for another assemble run building in {plan.build_dir} ..."):
        built = plan.build_dir / BUILT_STAMP
        fingerprint = _fingerprint(plan)
        if _unchanged(plan, built, fingerprint):
            ui.step(f"build {plan.unit.name}: unchanged since its last build, reusing {plan.build_dir}")
            return plan.build_dir
        built.unlink(missing_ok=True)  # from here until the build ends, nothing vouches for the tree
        for name in (cachestats.STATS_LOG, cachestats.STATS_FILE):
            (plan.build_dir / name).unlink(missing_ok=True)          # this build's counters only
        start = time.monotonic()
        stats = None
        if plan.in_container:
            _run_in_container(plan, engine or container.find_engine())
        else:
            stats = _run_here(plan)
        _record_cache_stats(plan, stats)
        tmp = built.with_name(BUILT_STAMP + ".tmp")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, "outputs": _outputs(plan.build_dir)}, indent=1))
        os.replace(tmp, built)
        ui.info(f"unit {plan.unit.name} ready in {ui.fmt_seconds(time.monotonic() - start)} "
                f"(log: {plan.build_dir / LOG})")
        return plan.build_dir


def _run_in_container(plan: UnitPlan, engine: Engine) -> None:
    """The unit in its image; a Redis remote cache reaches it through a relay open for this run only."""
    if not cacherelay.relayable(plan.remote_cache):
        run_container(container_run(plan, engine))
        return
    assert plan.remote_cache is not None
    with cacherelay.Relay(plan.remote_cache) as relay:
        if why := relay.probe():
            ui.warn(f"unit {plan.unit.name}: the remote cache {plan.remote_cache} does not "
                    f"answer ({why}); the container builds with its local ccache")
        run_container(container_run(plan, engine, relay=relay))
        if relay.failures:
            ui.warn(f"unit {plan.unit.name}: {relay.failures} connections to the remote cache failed "
                    f"({relay.last_error}); those compiles used the local ccache")


def _run_here(plan: UnitPlan) -> cachestats.CacheStats | None:
    """Configure and build on this host; sccache's counters when it fronted the compilers."""
    for tool in plan.stored:     # the copies of cmake, ninja and the launcher the command lines name
        toolstore.ensure(tool)
    env = plan.environment.mapping({"NINJA_STATUS": "[%f/%t] ", **dict(plan.env)})
    # relative paths under the cache: hits across build folders, and across machines whose HOME differs
    for k, v in remotecache.launcher_env(plan.remote_cache, plan.launcher or "", cache_dir()).items():
        if k in ("CCACHE_BASEDIR", "SCCACHE_BASEDIRS"):
            env.setdefault(k, v)          # a base folder the caller chose wins
        else:
            env[k] = v                    # --remote-cache / ASSEMBLE_REMOTE_CACHE, asked for explicitly
    if plan.launcher == "ccache":
        env["CCACHE_STATSLOG"] = str(plan.build_dir / cachestats.STATS_LOG)
    if notice := plan.environment.notice():
        line, serious = notice
        (ui.warn if serious else ui.info)(line)
        with open(plan.build_dir / LOG, "a") as f:
            f.write(f"assemble: {line}\n")
    if plan.launcher != "sccache":
        _configure_and_build(plan, env)
        return None
    sccache = dict(plan.defines)["CMAKE_C_COMPILER_LAUNCHER"]
    with sccacheserver.dedicated(sccache, env, plan.remote_cache, f"unit {plan.unit.name}") as server:
        _configure_and_build(plan, server.env)
    return server.stats


def _configure_and_build(plan: UnitPlan, env: dict[str, str]) -> None:
    log = plan.build_dir / LOG
    stamp = plan.build_dir / CONFIGURED_STAMP
    if not stamp.is_file():
        ui.step(f"configure {plan.unit.name}: {plan.build_dir}")
        run_logged(plan.configure, log, f"configure {plan.unit.name}", fix=_FIX, env=env)
        stamp.write_text(json.dumps({"key": plan.key, "configure": plan.configure}, indent=1))
    else:
        ui.step(f"configure {plan.unit.name}: reusing {plan.build_dir}")
    ui.step(f"build {plan.unit.name}: {', '.join(plan.targets)}")
    run_logged(plan.build, log, f"build {plan.unit.name}", fix=_FIX, env=env, progress=True)


def _record_cache_stats(plan: UnitPlan, stats: cachestats.CacheStats | None) -> None:
    """The compile cache's counters of this build: one line in the log, a file for the manifest
    (sccache's come from its server; ccache's from the build's stats log)."""
    if plan.launcher == "ccache":
        reached = not plan.in_container or cacherelay.relayable(plan.remote_cache)
        stats = cachestats.read_stats_log(plan.build_dir / cachestats.STATS_LOG,
                                          plan.remote_cache if reached else None)
    if stats is None:
        return
    ui.info(f"compile cache of unit {plan.unit.name}: {stats.line()}")
    with open(plan.build_dir / LOG, "a") as f:
        f.write(f"assemble: compile cache: {stats.line()}\n")
    (plan.build_dir / cachestats.STATS_FILE).write_text(json.dumps(stats.as_dict(), indent=1))


def _tool_stats(tools: dict[str, Any]) -> dict[str, Any]:
    """Size and mtime of every tool file the plan names: an upgraded toolkit is a changed toolchain even
    when its --version line is not. Tools with a digest are left out: the key names their content
    already, and where they were found (another virtual environment) changes nothing."""
    out = {}
    for name, tool in sorted(tools.items()):
        if isinstance(tool, dict) and tool.get("sha256"):
            continue
        values = tool.values() if isinstance(tool, dict) else [tool]
        for v in values:
            if isinstance(v, str) and v.startswith("/") and os.path.isfile(v):
                st = os.stat(v)
                out[f"{name}:{v}"] = [st.st_size, st.st_mtime_ns]
    return out


def _outputs(build_dir: Path) -> dict[str, Any]:
    """bin/ as the build left it; a file deleted or touched since means the stamp no longer holds."""
    out = {}
    bindir = build_dir / "bin"
    for entry in sorted(bindir.iterdir()) if bindir.is_dir() else ():
        st = entry.lstat()
        out[entry.name] = os.readlink(entry) if entry.is_symlink() else [st.st_size, st.st_mtime_ns]
    return out


def _fingerprint(plan: UnitPlan) -> dict[str, Any]:
    # plan.key already hashes recipe, unit, sha, patches, defines (flags, launcher) and tool identities.
    return {"key": plan.key, "targets": list(plan.targets), "configure": list(plan.configure),
            "tools": _tool_stats(plan.toolchain)}


def _fixed_source(plan: UnitPlan) -> bool:
    """Only a tree the cache holds at a sha is known not to change under us; a --source folder may."""
    return plan.sha is not None and plan.source_dir.resolve().is_relative_to(cache_dir())


def _unchanged(plan: UnitPlan, stamp: Path, fingerprint: dict[str, Any]) -> bool:
    try:
        data = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return False
    return (_fixed_source(plan) and data.get("fingerprint") == fingerprint
            and data.get("outputs") == _outputs(plan.build_dir) and bool(data.get("outputs")))
