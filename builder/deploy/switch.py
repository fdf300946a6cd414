"""The switch: put a release in service, gate it, and go back when it fails.

Order (a SIGKILL at any instant leaves exactly one `current`: the old release or the new one):
refuse everything refusable before touching anything; copy the release beside the one in service;
optional preflight of the new release on a free port; wait for the port (naming its holder; nothing
changed yet); write the unit; record the switch; stop the unit; wait for the port again; flip `current`
(a symlink renamed over it); restart; gate (a restart systemd refuses fails it, and so does the new
release's first crash: builder.deploy.watch). Passed: the previous release moves to trash/. Failed: flip
back, restore the previous release's unit, restart, gate it the same way; the failed release moves to
trash/ID.TS.failed; exit 1 naming the step and quoting the unit's journal. Nothing is ever deleted here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import locks, ui
from builder.deploy import ledger as owned
from builder.deploy import ports
from builder.deploy.credentials import SECRETS, first_key, parse_secrets
from builder.deploy.defaults import DEFAULT_PORT, DEFAULT_PREFLIGHT, GATE_TIMEOUT, PORT_TIMEOUT, PREFLIGHTS
from builder.deploy.envfile import DEFAULT_HOST, parse_env, render_env
from builder.deploy.gate import GateResult, devices_from_log, gate
from builder.deploy.inroot import in_image, inside
from builder.deploy.layout import ENV, FAILED_SUFFIX, RECORD, RUNTIME, SERVE, UNUSED_SUFFIX, HostTree
from builder.deploy.model import read_model
from builder.deploy.release import ReleasePlan, checked_runtime, intact, plan_release, stage
from builder.deploy.serve import render_serve
from builder.deploy.service import LogLine, Recorder, ServiceManager
from builder.deploy.unit import UnitSpec, render_sysusers, render_unit
from builder.deploy.unitquote import UnitValueError
from builder.deploy.watch import UnitWatch, said, server_text
from builder.errors import FAILED, AssembleError


@dataclass(frozen=True)
class Timeouts:
    gate: float = GATE_TIMEOUT
    port: float = PORT_TIMEOUT

    def __post_init__(self) -> None:
        # A gate of 0 s fails every release, and the rollback it triggers stops what serves: refused up front.
        if not (math.isfinite(self.gate) and self.gate > 0):
            raise AssembleError(f"--gate-timeout {self.gate:g} is not a positive number of seconds", where="--gate-timeout",
                                fix=f"give the seconds a release has to pass its gate, e.g. --gate-timeout {GATE_TIMEOUT:.0f}")
        if not (math.isfinite(self.port) and self.port >= 0):
            raise AssembleError(f"--port-timeout {self.port:g} is not a number of seconds", where="--port-timeout",
                                fix=f"give 0 or more seconds, e.g. --port-timeout {PORT_TIMEOUT:.0f}")


@dataclass(frozen=True)
class DeployRequest:
    runtime: str
    name: str
    model: str
    port: int = DEFAULT_PORT
    env: tuple[str, ...] = ()
    root: str | None = None
    dry_run: bool = False
    preflight: str = DEFAULT_PREFLIGHT
    timeouts: Timeouts = Timeouts()
    secrets: tuple[str, ...] = ()        # --secret NAME=FILE


@dataclass(frozen=True)
class Serving:
    """How a release is reached and what it must answer: from its own env."""
    port: int
    host: str                       # where the gate connects (a wildcard listen address -> loopback)
    model_names: tuple[str, ...]    # what /v1/models may call the model: its host path, file name, alias
    api_key: str | None             # read from the --secret api-key file (deploy runs as root), never stored

    @classmethod
    def of(cls, env: dict[str, str], key_file: str | None = None) -> Serving:
        listen = env.get("LLAMA_ARG_HOST") or DEFAULT_HOST
        model = env.get("LLAMA_ARG_MODEL", "")
        return cls(int(env["LLAMA_ARG_PORT"]), {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(listen, listen),
                   tuple(filter(None, (model, Path(model).name, env.get("LLAMA_ARG_ALIAS")))),
                   first_key(Path(key_file)) if key_file else None)

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> Serving:
        """How the release a live host's release.json describes is reached."""
        return cls.of(record["env"], dict(record.get("secrets") or {}).get("api-key"))


@dataclass(frozen=True)
class Outcome:
    name: str
    release: str                         # what serves now (or would: --root, --dry-run)
    previous: str | None
    gate: GateResult | None = None       # None: not gated (--root, --dry-run)
    trashed: tuple[str, ...] = ()
    files: tuple[str, ...] = ()          # written (with --dry-run: that would be)
    commands: tuple[str, ...] = ()       # --root, --dry-run: what a live deploy runs
    texts: tuple[tuple[str, str], ...] = ()   # --dry-run: each file's full text
    reused: bool = False
    unchanged: bool = False              # the release asked for already served: nothing written, nothing restarted

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["texts"] = dict(self.texts)
        return d


@dataclass(frozen=True)
class Plan:
    """Everything a deploy writes, computed before anything is touched."""
    tree: HostTree
    release: ReleasePlan
    unit: str
    sysusers: str
    serving: Serving


def check_root(root: str | None) -> Path:
    """`/` for the live host; --root DIR must be an existing system root folder that is not `/` itself."""
    if root is None:
        return Path("/")
    path = Path(os.path.realpath(Path(root).expanduser()))
    if path == Path("/"):
        raise AssembleError("--root is the running system's own root; --root writes an image's tree without "
                            "starting anything", where="--root", fix="drop --root to deploy on this host")
    if not path.is_dir():
        raise AssembleError("--root is not an existing folder", where=str(root),
                            fix="give the image's or chroot's root folder (it must hold etc/)")
    if not inside(path, "etc").is_dir():
        raise AssembleError("--root holds no etc/: it is not a system's root folder", where=str(path),
                            fix="give the image's or chroot's root folder")
    return path


def _model_in_image(root: Path, given_root: str, given: str) -> Path:
    """--model under --root: as the image holds it; a model outside the image that does not exist at all
    is refused as missing (the plainer of the two reasons)."""
    try:
        return in_image(root, given_root, given, "the model")
    except AssembleError:
        read_model(given)
        raise


def _secret_in_image(root: Path, given_root: str, item: str) -> str:
    """--secret NAME=FILE under --root: FILE as the image holds it (parse_secrets refuses a malformed item)."""
    name, sep, given = item.partition("=")
    return f"{name}={in_image(root, given_root, given, f'the {name} file')}" if sep and given else item


def check_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise AssembleError(f"--port {port} is not a TCP port", where="--port", fix="give 1-65535, e.g. --port 8080")
    return port


def make_plan(req: DeployRequest) -> Plan:
    """Every refusal that needs no lock and touches nothing: name, port, env, root, model, runtime."""
    root = check_root(req.root)
    tree = HostTree(root, req.name)
    port = check_port(req.port)
    extra = parse_env(list(req.env))
    if req.preflight not in PREFLIGHTS:
        raise AssembleError(f"--preflight {req.preflight!r} is not one of {', '.join(PREFLIGHTS)}", where="--preflight",
                            fix="write --preflight tiny (default), model or none")
    model = read_model(req.model if req.root is None else _model_in_image(root, req.root, req.model))
    secrets = parse_secrets(list(req.secrets) if req.root is None else [_secret_in_image(root, req.root, s)
                                                                         for s in req.secrets])
    host_model = str(tree.host_path(model.path))
    host_secrets = tuple((name, str(tree.host_path(p))) for name, p in secrets)
    runtime = checked_runtime(req.runtime)
    env = render_env(model, host_model, port, runtime.backends, extra, host_secrets, tree.unit_name)
    release = plan_release(runtime, env.render(), render_serve(runtime.backends), host_model, model.size, port,
                           env.as_dict(), dict(host_secrets))
    unit, sysusers = unit_texts(tree, release.record)
    key = dict(secrets).get("api-key")
    return Plan(tree, release, unit, sysusers, Serving.of(env.as_dict(), str(key) if key else None))


def unit_texts(tree: HostTree, record: dict[str, Any]) -> tuple[str, str]:
    """The unit and sysusers file a release needs, from its own record (backends: devices; model: paths)."""
    spec = UnitSpec(name=tree.name, user=tree.user, base=tree.host_path(tree.base),
                    backends=tuple(record["runtime"]["backends"]), model=Path(record["model"]["path"]),
                    credentials=tuple(dict(record.get("secrets") or {}).items()))
    try:
        return render_unit(spec), render_sysusers(spec)
    except UnitValueError as exc:
        raise AssembleError(f"the unit cannot name this path: {exc}", where=str(spec.model),
                            fix="rename the model's file or folder") from None


def release_record(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / RECORD).read_text()))


# --- one run under the tree's lock ------------------------------------------------------------------------

class _Run:
    """One deploy, rollback or retire under the tree's lock; holds the ledger as it changes."""

    def __init__(self, tree: HostTree, service: ServiceManager):
        self.tree, self.service = tree, service
        self.ledger = owned.load(tree)

    def tidy(self) -> None:
        """What a killed run left: release copies, a temporary `current` link (ours by name and target)."""
        self.ledger = owned.tidy(self.tree, self.ledger)
        for p in self.tree.base.glob(".current.tmp-*"):
            if p.is_symlink() and os.readlink(p).startswith("releases/"):
                p.unlink()

    def clear_unused(self, keep: str) -> None:
        """Releases a stopped run copied but never put in service (killed, or the port stayed held): to
        trash/ID.TS.unused, so releases/ holds only what serves and what is being switched in."""
        for path, _ in owned.recorded(self.tree, self.ledger, owned.RELEASE):
            if path.parent == self.tree.releases and path.name not in (keep, self.previous()) \
                    and owned.owns(self.tree, self.ledger, path):
                self.to_trash(path.name, tail=UNUSED_SUFFIX)

    def previous(self) -> str | None:
        """The release in service now (None: none, or a link to nothing deploy owns)."""
        rid = self.tree.current_id()
        return rid if rid is not None and owned.owns_current(self.tree, self.ledger) else None

    def serving_as_planned(self, plan: Plan) -> bool:
        """The release in service is exactly the plan's (every file by its hash), its unit and sysusers file
        hold the plan's text and the unit runs: a redeploy of it then changes and restarts nothing."""
        tree = self.tree
        if intact(tree.release(plan.release.release_id), plan.release.release_id) is not None:
            return False
        if not all(owned.holds(path, text) for path, text in ((tree.unit, plan.unit), (tree.sysusers, plan.sysusers))):
            return False
        state = self.service.state(tree.unit_name)
        return state.active == "active" and state.sub == "running" and state.main_pid is not None

    def flip(self, release_id: str) -> None:
        """`current` -> releases/ID in one rename: a symlink made beside it, renamed over it."""
        tmp = self.tree.base / f".current.tmp-{secrets.token_hex(4)}"
        os.symlink(self.tree.current_target(release_id), tmp)
        os.replace(tmp, self.tree.current)
        owned.fsync_dir(self.tree.base)

    def to_trash(self, release_id: str, failed: bool = False, tail: str = "") -> str:
        stamp, tail = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), FAILED_SUFFIX if failed else tail
        dest, n = self.tree.trash / f"{release_id}.{stamp}{tail}", 0
        while os.path.lexists(dest):
            n += 1
            dest = self.tree.trash / f"{release_id}.{stamp}-{n}{tail}"
        self.ledger = owned.move(self.tree, self.ledger, self.tree.release(release_id), dest)
        return dest.name

    def write_unit(self, release_id: str) -> None:
        """The unit and sysusers file this release needs (other backends need other devices), then sysusers
        and daemon-reload."""
        unit, sysusers = unit_texts(self.tree, release_record(self.tree.release(release_id)))
        self.ledger = owned.write_file(self.tree, self.ledger, self.tree.unit, unit)
        self.ledger = owned.write_file(self.tree, self.ledger, self.tree.sysusers, sysusers)
        self.service.sysusers(str(self.tree.host_path(self.tree.sysusers)))
        self.service.daemon_reload()

    def start_and_gate(self, serving: Serving, timeout: float) -> GateResult:
        """Restart the unit on what `current` points at and gate it. A restart systemd refuses (the unit
        cannot even start: a path it cannot mount) is a failed gate too, at its own step; either way the
        failure quotes the unit's journal since this restart."""
        unit, since, start = self.tree.unit_name, time.time(), time.monotonic()
        try:
            self.service.enable(unit)
            self.service.restart(unit)
        except AssembleError as exc:
            if exc.code != FAILED:          # no systemctl here at all: not a gate's verdict
                raise
            result = GateResult(False, "restart", exc.what, time.monotonic() - start)
        else:
            result = gate(serving.host, serving.port, serving.model_names, timeout, api_key=serving.api_key,
                          proc=UnitWatch(self.service, unit))
        log = self._journal(unit, since, wait=not result.passed and result.step != "restart")
        if not result.passed:
            result = dataclasses.replace(result, detail=f"{result.detail}; {said(log)}")
        return dataclasses.replace(result, devices=devices_from_log(server_text(log)))

    def _journal(self, unit: str, since: float, wait: bool) -> tuple[LogLine, ...]:
        """The unit's journal since `since`; after a server failed, read again for up to a second while it
        holds nothing the server printed (journald may file a dead server's last lines after systemd's own)."""
        log = self.service.journal(unit, since)
        for _ in range(5 if wait else 0):
            if any(line.from_server for line in log):
                break
            time.sleep(0.2)
            log = self.service.journal(unit, since)
        return log

    def record_gate(self, release_id: str, result: GateResult, what: str) -> None:
        body = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "release": release_id, "what": what,
                "result": result.as_dict()}
        locks.write_atomic(self.tree.gate_record, json.dumps(body, indent=2) + "\n")


@contextlib.contextmanager
def locked(tree: HostTree, service: ServiceManager, create: bool = True) -> Iterator[_Run]:
    """The tree's flock, and the run holding its ledger; the folder is made (nothing else) on a first deploy."""
    owned.refuse_foreign_base(tree)
    if not create and not tree.ledger.exists():
        raise AssembleError(f"nothing is deployed under the name {tree.name}", where=str(tree.base),
                            fix="deploy first: assemble deploy RUNTIME --name NAME --model FILE")
    # The service user reads the tree: an operator's umask 077 would make folders it cannot enter.
    umask = os.umask(0o022)
    try:
        tree.base.mkdir(parents=True, exist_ok=True)
        with locks.exclusive(tree.lock, f"waiting for another deploy of {tree.name} ({tree.lock})"):
            owned.refuse_foreign_base(tree)
            run = _Run(tree, service)
            run.tidy()
            yield run
    finally:
        os.umask(umask)


# --- deploy ------------------------------------------------------------------------------------------------

def deploy(req: DeployRequest, service: ServiceManager) -> Outcome:
    plan = make_plan(req)
    tree, rid = plan.tree, plan.release.release_id
    if req.dry_run:
        return _dry_run(plan)
    targets = [tree.unit, tree.sysusers, tree.release(rid), tree.current]
    owned.refuse_foreign_base(tree)
    owned.refuse_foreign(tree, owned.load(tree), targets)        # before even the folder is made
    with locked(tree, service) as run:
        owned.refuse_foreign(tree, run.ledger, targets)
        previous = run.previous()
        if previous == rid and tree.root == Path("/") and run.serving_as_planned(plan):
            return Outcome(req.name, rid, previous, reused=True, unchanged=True)
        run.clear_unused(keep=rid)
        folder, run.ledger, reused = stage(tree, run.ledger, plan.release)
        files = (str(folder), str(tree.unit), str(tree.sysusers), str(tree.current))
        if tree.root != Path("/"):                                  # --root: an image's tree, nothing started
            run.ledger = owned.write_file(tree, run.ledger, tree.unit, plan.unit)
            run.ledger = owned.write_file(tree, run.ledger, tree.sysusers, plan.sysusers)
            run.flip(rid)
            trashed: tuple[str, ...] = (run.to_trash(previous),) if previous not in (None, rid) else ()
            return Outcome(req.name, rid, previous, trashed=trashed, files=files, reused=reused,
                           commands=_commands(tree, previous=None))
        if req.preflight != "none":
            preflight(folder, req.preflight, req.timeouts.gate)
        result, trashed = _switch(run, rid, plan.serving, previous, req.timeouts)
        return Outcome(req.name, rid, previous, gate=result, trashed=trashed, files=files, reused=reused)


def _commands(tree: HostTree, previous: str | None) -> tuple[str, ...]:
    """What a live deploy runs once the tree is in place (--dry-run and --root print them)."""
    recorder = Recorder()
    recorder.sysusers(str(tree.host_path(tree.sysusers)))
    recorder.daemon_reload()
    if previous is not None:
        recorder.stop(tree.unit_name)
    recorder.enable(tree.unit_name)
    recorder.restart(tree.unit_name)
    return tuple(recorder.commands)


def _switch(run: _Run, rid: str, serving: Serving, previous: str | None, timeouts: Timeouts, what: str = "deploy"
            ) -> tuple[GateResult, tuple[str, ...]]:
    """Put releases/RID in service; (its passed gate, what went to trash), or exit 1 after rolling back."""
    tree, service, unit = run.tree, run.service, run.tree.unit_name
    before = service.state(unit)
    ports.wait_port_free(serving.port, timeouts.port, allowed_pid=before.main_pid,
                         why=" (nothing was stopped or switched; the new release waits in releases/)")
    run.write_unit(rid)
    locks.write_atomic(tree.switch_record, json.dumps({"from": previous, "to": rid, "pid": os.getpid()}) + "\n")
    if before.main_pid is not None or before.active not in ("inactive", "failed"):
        service.stop(unit)
    ports.wait_port_free(serving.port, timeouts.port, why=f" after {unit} stopped (`current` was not switched)")
    run.flip(rid)
    result = run.start_and_gate(serving, timeouts.gate)
    run.record_gate(rid, result, what)
    if not result.passed:
        _roll_back(run, rid, serving, previous, result, timeouts)      # raises
    trashed = (run.to_trash(previous),) if previous not in (None, rid) else ()
    tree.switch_record.unlink(missing_ok=True)
    return result, trashed


def _roll_back(run: _Run, rid: str, serving: Serving, previous: str | None, failed: GateResult,
               timeouts: Timeouts) -> None:
    tree, service, unit = run.tree, run.service, run.tree.unit_name
    service.stop(unit)
    ports.wait_port_free(serving.port, timeouts.port, why=f" after {unit} stopped")
    fix = f"see `journalctl -u {unit}` and `assemble deploy --status {tree.name}`; fix the runtime or model, deploy again"
    if previous is None or previous == rid:
        # Nothing to go back to: the unit must not keep starting a release that failed its gate (nor start it
        # at boot), and `current` must not point at it. The link is deploy's own; the release goes to trash.
        service.disable(unit)
        tree.current.unlink(missing_ok=True)
        owned.fsync_dir(tree.base)
        trashed = run.to_trash(rid, failed=True)
        tree.switch_record.unlink(missing_ok=True)
        raise AssembleError(f"{failed.line()}; nothing else was in service: {unit} is stopped and disabled, the "
                            f"release is in trash/{trashed}", where=unit, code=FAILED, fix=fix)
    run.flip(previous)
    run.write_unit(previous)
    back_serving = Serving.of_record(release_record(tree.release(previous)))
    back = run.start_and_gate(back_serving, timeouts.gate)
    run.record_gate(previous, back, "back to the previous release")
    trashed = run.to_trash(rid, failed=True)
    tree.switch_record.unlink(missing_ok=True)
    again = "the previous release serves again" if back.passed else f"the previous release FAILED too ({back.line()})"
    raise AssembleError(f"the new release {failed.line()}; rolled back: {again}; the failed one is in trash/{trashed}",
                        where=unit, code=FAILED, fix=fix)


def preflight(folder: Path, kind: str, timeout: float) -> GateResult:
    """Run the new release's serve script as a plain child on a free port and gate it, before anything in
    service is touched. tiny: with a random tiny model (a real request through the runtime, at no memory
    cost while the old release still serves); model: with the real model."""
    from builder.check.dynamic import free_port
    from builder.check.tinymodel import write_tiny_llama
    from builder.paths import scratch
    from builder.proc import dies_with_us, stop

    record = release_record(folder)
    env = dict(record["env"])
    key_file = dict(record.get("secrets") or {}).get("api-key")   # the operator's file itself: this runs as root
    with scratch("deploy-preflight-") as tmp:
        port = free_port()
        env.update({"LLAMA_ARG_PORT": str(port), "LLAMA_ARG_HOST": "127.0.0.1", "PATH": "/usr/bin:/bin"})
        if kind == "tiny":
            env["LLAMA_ARG_MODEL"] = str(write_tiny_llama(tmp / "tiny.gguf"))
            env.pop("LLAMA_ARG_ALIAS", None)
        if key_file:
            env[SECRETS["api-key"].env] = key_file
        serving = Serving.of(env, key_file)
        log = tmp / "server.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([str(folder / SERVE)], env=env, cwd=tmp, stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=dies_with_us())  # noqa: PLW1509 -- one prctl, no lock taken
        try:
            result = gate(serving.host, port, serving.model_names, timeout, proc=proc, api_key=serving.api_key)
            result = dataclasses.replace(result, devices=devices_from_log(log.read_text(errors="replace")))
        finally:
            stop(proc)
        if not result.passed:
            said = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise AssembleError(f"preflight of the new release ({kind} model): {result.line()}; nothing in "
                                "service was touched", where=str(folder), code=FAILED,
                                fix=f"the server said: {said or 'nothing'}")
        ui.info(f"preflight ({kind} model): {result.detail}")
        return result


def _dry_run(plan: Plan) -> Outcome:
    tree, rid = plan.tree, plan.release.release_id
    rel = tree.release(rid)
    texts = ((f"{rel}/{ENV}", plan.release.env), (f"{rel}/{SERVE}", plan.release.serve), (str(tree.unit), plan.unit),
             (str(tree.sysusers), plan.sysusers))
    files = (f"{rel}/{RUNTIME}/ (a copy of {plan.release.runtime.path})", *(p for p, _ in texts), f"{rel}/{RECORD}",
             f"{tree.current} -> {tree.current_target(rid)}")
    previous = tree.current_id()
    return Outcome(tree.name, rid, previous, files=files, texts=texts,
                   commands=_commands(tree, previous) if tree.root == Path("/") else ())


# --- rollback ----------------------------------------------------------------------------------------------

def rollback(name: str, service: ServiceManager, timeouts: Timeouts = Timeouts(), root: Path = Path("/")) -> Outcome:
    """Bring the newest release in trash that did not fail its gate back into service, gated as a deploy."""
    tree = HostTree(root, name)
    with locked(tree, service, create=False) as run:
        candidates = [(p, e) for p, e in owned.recorded(tree, run.ledger, owned.RELEASE)
                      if p.parent == tree.trash and not p.name.endswith((FAILED_SUFFIX, UNUSED_SUFFIX))]
        if not candidates:
            raise AssembleError("trash/ holds no release to roll back to (none, or only ones that failed their gate "
                                "or never served)", where=str(tree.trash), fix="deploy a runtime instead")
        src = candidates[-1][0]
        rid = release_record(src)["release"]
        if why := intact(src, rid):
            raise AssembleError(f"the release to roll back to is damaged ({why}); nothing was changed", where=str(src),
                                fix="deploy the runtime again instead")
        previous = run.previous()
        if previous == rid:
            raise AssembleError(f"{rid} is already in service", where=str(tree.current), fix="nothing to do")
        if not os.path.lexists(tree.release(rid)):
            run.ledger = owned.move(tree, run.ledger, src, tree.release(rid))
        elif not owned.owns(tree, run.ledger, tree.release(rid)):
            raise owned.foreign(tree.release(rid))
        serving = Serving.of_record(release_record(tree.release(rid)))
        result, trashed = _switch(run, rid, serving, previous, timeouts, what="--rollback")
        return Outcome(name, rid, previous, gate=result, trashed=trashed)
