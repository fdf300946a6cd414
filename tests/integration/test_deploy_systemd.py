"""`assemble deploy` against a real systemd 252 (Debian 12) booted in a container (issue 29).

Every test drives the real CLI inside the guest (Debian 12's python3, the checkout bound read-only)
with the suite's real cpu runtime, a second identity of it (`assemble repair` of that runtime: the
same bytes relabelled, another manifest digest) and the tiny random-weight llama model. The guest's
own systemctl, journal and sockets are the judges: a completion is asked from inside the guest,
never through the tool's own gate.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from builder.check.tinymodel import write_tiny_llama
from tests.support.common import SHA, TEST_CACHE, assemble
from tests.support.systemdguest import Guest, boot

pytestmark = pytest.mark.slow

GATE_TIMEOUT = 60


@pytest.fixture(scope="session")
def systemd_guest(tmp_path_factory, cpu_runtime):
    """The booted guest, its share folder holding two runtime identities and the model."""
    share = tmp_path_factory.mktemp("guest-share")
    share.chmod(0o755)
    rt = share / "rt"
    rt.mkdir(mode=0o755)
    shutil.copytree(cpu_runtime, rt / "runtime-cpu", symlinks=True)
    # a second identity of the same build: repair relabels it (recipe name, origins, manifest digest)
    assemble("repair", str(rt / "runtime-cpu"), "--name", "cpu2", "--out", str(rt / "runtime-cpu2"), check=True)
    models = share / "models"
    models.mkdir(mode=0o755)
    vocab = TEST_CACHE / "cache" / "sources" / SHA / "models" / "ggml-vocab-llama-spm.gguf"
    write_tiny_llama(models / "tiny.gguf", vocab_from=vocab).chmod(0o644)
    # the same model with its tensor data cut short: the header (all deploy reads) is whole
    cut = models / "truncated.gguf"
    data = (models / "tiny.gguf").read_bytes()
    cut.write_bytes(data[:len(data) - 4096])
    cut.chmod(0o644)
    guest = boot(share)
    try:
        yield guest
    finally:
        guest.poweroff()
        assert guest.nspawn.returncode is not None


@pytest.fixture(scope="session")
def paths(systemd_guest):
    g = systemd_guest
    return {"a": str(g.at(g.share / "rt" / "runtime-cpu")), "b": str(g.at(g.share / "rt" / "runtime-cpu2")),
            "model": str(g.at(g.share / "models" / "tiny.gguf")),
            "truncated": str(g.at(g.share / "models" / "truncated.gguf"))}


# --- what the guest says -------------------------------------------------------------------------

def deploy(g: Guest, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return g.assemble("deploy", *args, timeout=timeout)


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr and "internal error" not in proc.stderr, proc.stderr


def complete(g: Guest, port: int, n: int = 6, timeout: float = 60) -> int:
    """Ask the server on the guest's loopback for n tokens (from inside the guest); the count it made."""
    code = ("import json,sys,urllib.request as u\n"
            f"r=u.Request('http://127.0.0.1:{port}/completion',data=json.dumps({{'prompt':'The capital of',"
            f"'n_predict':{n},'ignore_eos':True}}).encode(),headers={{'Content-Type':'application/json'}})\n"
            "print(json.loads(u.urlopen(r,timeout=30).read())['tokens_predicted'])")
    deadline = time.monotonic() + timeout
    while True:
        proc = g.run("python3", "-c", code, timeout=60)
        if proc.returncode == 0:
            return int(proc.stdout.strip())
        assert time.monotonic() < deadline, f"no completion on port {port}: {proc.stderr[-1500:]}"
        time.sleep(0.5)


def status(g: Guest, name: str) -> dict:
    proc = ok(deploy(g, "--status", name, "--json"))
    return json.loads(proc.stdout)


def current(g: Guest, name: str) -> str:
    """The release `current` points at (its folder name), checked to be a whole release folder."""
    base = f"/opt/assemble/{name}"
    link = g.run("readlink", f"{base}/current", check=True).stdout.strip()
    target = g.run("readlink", "-e", f"{base}/current", check=True).stdout.strip()
    assert Path(target).parent == Path(base) / "releases", (link, target)
    g.run("test", "-x", f"{target}/runtime/bin/llama-server", check=True)
    return Path(target).name


def unit_show(g: Guest, name: str) -> dict:
    out = g.systemctl("show", f"assemble-{name}.service", "-p", "ActiveState,SubState,MainPID,NRestarts").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def tree(g: Guest, name: str) -> str:
    """Every file of the deploy (its tree, unit, sysusers line) with size and mtime: a refusal changes none."""
    return g.run("find", f"/opt/assemble/{name}", f"/etc/systemd/system/assemble-{name}.service",
                 f"/etc/sysusers.d/assemble-{name}.conf", "-printf", "%p %s %T@ %l\n", check=True).stdout


def tree_entries(g: Guest, name: str) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line for line in tree(g, name).splitlines()}


def first(g: Guest, paths: dict, name: str, port: int, runtime: str = "a", *extra: str) -> str:
    ok(deploy(g, paths[runtime], "--name", name, "--model", paths["model"], "--port", str(port),
              "--gate-timeout", str(GATE_TIMEOUT), *extra))
    assert complete(g, port) == 6
    return current(g, name)


# --- the tests ---------------------------------------------------------------------------------------

def test_first_deploy_serves_through_the_hardened_unit(systemd_guest, paths):
    g = systemd_guest
    proc = ok(deploy(g, paths["a"], "--name", "first", "--model", paths["model"], "--port", "8101",
                     "--gate-timeout", str(GATE_TIMEOUT)))
    no_traceback(proc)
    assert complete(g, 8101, n=9) == 9                       # asked from inside the guest, not by the tool
    unit = unit_show(g, "first")
    assert unit["ActiveState"] == "active" and int(unit["MainPID"]) > 0
    assert g.systemctl("is-enabled", "assemble-first.service").stdout.strip() == "enabled"
    # the server runs as the dedicated user, unprivileged, under the seccomp filter
    st = dict(line.split(":", 1) for line in g.run("cat", f"/proc/{unit['MainPID']}/status", check=True).stdout
              .splitlines())
    uid = int(st["Uid"].split()[0])
    assert uid != 0 and g.run("id", "-un", str(uid)).stdout.strip() == "assemble-first"
    assert st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2" and int(st["CapEff"], 16) == 0
    exe = g.run("readlink", f"/proc/{unit['MainPID']}/exe").stdout.strip()
    assert exe == f"/opt/assemble/first/releases/{current(g, 'first')}/runtime/bin/llama-server"
    s = status(g, "first")
    assert s["current"] == current(g, "first") and s["state"]["active"] == "active"
    assert s["last_gate"]["result"]["passed"] is True and s["last_gate"]["release"] == s["current"]
    assert s["backends"] == ["cpu"] and s["trash"] == []
    human = ok(deploy(g, "--status", "first")).stdout
    assert s["current"] in human and "passed" in human and "active" in human


def test_unit_exposure_score(systemd_guest, paths):
    """The unit deploy wrote, scored by the guest's own systemd-analyze (252): offline on the file,
    and online on the loaded, running unit."""
    g = systemd_guest
    first(g, paths, "score", 8102)
    for args in (("--offline=yes", "/etc/systemd/system/assemble-score.service"), ("assemble-score.service",)):
        out = g.run("systemd-analyze", "security", *args, check=True).stdout
        score = float(out.rsplit("Overall exposure level for ", 1)[1].split(": ", 1)[1].split()[0])
        assert score <= 3.0, out[-2000:]


def test_second_runtime_switches_in_and_first_goes_to_trash(systemd_guest, paths):
    g = systemd_guest
    old = first(g, paths, "switch", 8103)
    pid_before = unit_show(g, "switch")["MainPID"]
    ok(deploy(g, paths["b"], "--name", "switch", "--model", paths["model"], "--port", "8103",
              "--gate-timeout", str(GATE_TIMEOUT)))
    new = current(g, "switch")
    assert new != old and "cpu2" in new
    assert complete(g, 8103) == 6 and unit_show(g, "switch")["MainPID"] != pid_before
    trash = g.run("ls", "/opt/assemble/switch/trash", check=True).stdout.split()
    assert len(trash) == 1 and trash[0].startswith(old + ".") and not trash[0].endswith(".failed")
    # moved, not deleted: the old release is whole in trash/, every runtime file there
    g.run("test", "-x", f"/opt/assemble/switch/trash/{trash[0]}/runtime/bin/llama-server", check=True)
    assert status(g, "switch")["trash"] == trash


FAULT = "LLAMA_ARG_KV_UNIFIED_PER_SLOT=4"


def test_first_request_failure_rolls_back_to_the_old_runtime(systemd_guest, paths):
    """The fault: the new release starts, loads the model and answers /health and /v1/models, then its
    first real completion fails (HTTP 400, exceed_context_size_error). `LLAMA_ARG_KV_UNIFIED_PER_SLOT=4`
    is llama-server's own per-slot context limit, sized too small for any real request, as an operator
    oversubscribing slots would. Every file is what verify --static checked (it cannot see how the server
    will be run), so only a real request shows it. The tiny-model preflight sees it too (checked last);
    here it is off, so the gate on the unit itself is the last line and must roll back."""
    g = systemd_guest
    old = first(g, paths, "rollback", 8104)
    args = ("--name", "rollback", "--model", paths["model"], "--port", "8104", "--env", FAULT,
            "--gate-timeout", str(GATE_TIMEOUT))
    start = time.monotonic()
    proc = deploy(g, paths["b"], *args, "--preflight", "none")
    took = time.monotonic() - start
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert "completion" in proc.stderr and "context" in proc.stderr, proc.stderr   # names the step and why
    assert current(g, "rollback") == old                    # flipped back
    assert complete(g, 8104) == 6                           # and the old one serves again
    assert took < 2 * GATE_TIMEOUT + 60, took               # within the gates (new + old), not a hang
    trash = g.run("ls", "/opt/assemble/rollback/trash", check=True).stdout.split()
    assert len(trash) == 1 and trash[0].endswith(".failed") and "cpu2" in trash[0]
    s = status(g, "rollback")
    assert s["current"] == old and s["state"]["active"] == "active"
    assert s["last_gate"]["release"] == old and s["last_gate"]["result"]["passed"] is True

    # with the default preflight the same release never reaches the unit: refused before the stop
    pid = unit_show(g, "rollback")["MainPID"]
    proc = deploy(g, paths["b"], *args)
    no_traceback(proc)
    assert proc.returncode == 1 and "preflight" in proc.stderr, proc.stderr
    assert unit_show(g, "rollback")["MainPID"] == pid and current(g, "rollback") == old


def test_port_held_by_another_process_waits_names_it_changes_nothing(systemd_guest, paths):
    g = systemd_guest
    old = first(g, paths, "held", 8105)
    pid_before = unit_show(g, "held")["MainPID"]
    # another process listens where the new release would serve (the deploy moves the service to 8115)
    holder = subprocess.Popen(g.cmd("python3", "-c", "import os,socket,time;s=socket.socket();"
                                    "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                                    "s.bind(('127.0.0.1',8115));s.listen();print(os.getpid(),flush=True);"
                                    "time.sleep(600)"),
                              stdout=subprocess.PIPE, text=True)
    holder_pid = None
    try:
        holder_pid = int(holder.stdout.readline())               # its PID as the guest sees it
        before = tree_entries(g, "held")
        start = time.monotonic()
        proc = deploy(g, paths["b"], "--name", "held", "--model", paths["model"], "--port", "8115",
                      "--port-timeout", "5", "--preflight", "none")
        took = time.monotonic() - start
        no_traceback(proc)
        assert proc.returncode == 1, proc.stderr
        assert "8115" in proc.stderr and str(holder_pid) in proc.stderr and "python3" in proc.stderr, proc.stderr
        assert took >= 5, took                                   # it waited for the port
        assert current(g, "held") == old and unit_show(g, "held")["MainPID"] == pid_before
        assert complete(g, 8105) == 6
        # changed nothing in service: the release it staged may stay in releases/ (not current) and its
        # ledger records that folder as the tool's; the lock file holds the last locker's pid
        # (renamed into state/, so that folder's mtime moves with it)
        staged = ("/opt/assemble/held/releases", "/opt/assemble/held/state/ledger.json", "/opt/assemble/held/.lock")
        after = tree_entries(g, "held")
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)} - {"/opt/assemble/held/state"}
        assert changed and not [p for p in changed if not p.startswith(staged)], [p for p in changed if not p.startswith(staged)]
        assert all(p in after for p in before)
        assert any("cpu2" in p for p in changed)
    finally:
        if holder_pid:
            g.run("kill", "-9", str(holder_pid))
        holder.kill()
        holder.wait(30)


def test_refusals_before_anything_is_stopped(systemd_guest, paths):
    """A missing model, a runtime failing verify --static and a foreign file where deploy writes:
    each refused with the serving unit untouched (same main PID, same tree, byte for byte)."""
    g = systemd_guest
    old = first(g, paths, "refuse", 8106)
    pid = unit_show(g, "refuse")["MainPID"]
    before = tree(g, "refuse")

    def untouched():
        assert unit_show(g, "refuse")["MainPID"] == pid and current(g, "refuse") == old
        assert tree(g, "refuse") == before

    # a model that is not there
    proc = deploy(g, paths["b"], "--name", "refuse", "--model", "/srv/assemble-test/models/missing.gguf",
                  "--port", "8106")
    no_traceback(proc)
    assert proc.returncode == 2 and "missing.gguf" in proc.stderr, proc.stderr
    untouched()

    # a runtime that fails verify --static: one backend module removed from a copy
    broken = g.share / "rt" / "runtime-cpu-broken"
    if not broken.exists():
        shutil.copytree(g.share / "rt" / "runtime-cpu2", broken, symlinks=True)
        next((broken / "bin").glob("libggml-cpu-haswell.so")).unlink()
    proc = deploy(g, str(g.at(broken)), "--name", "refuse", "--model", paths["model"], "--port", "8106")
    no_traceback(proc)
    assert proc.returncode == 1 and "verify --static" in proc.stderr and "libggml-cpu-haswell.so" in proc.stderr, \
        proc.stderr
    untouched()

    # a foreign file where deploy writes: the operator edited the unit by hand
    unit = "/etc/systemd/system/assemble-refuse.service"
    g.run("sh", "-c", f"echo '# operator: keep' >> {unit}", check=True)
    edited = g.run("sha256sum", unit, check=True).stdout
    before = tree(g, "refuse")
    proc = deploy(g, paths["b"], "--name", "refuse", "--model", paths["model"], "--port", "8106")
    no_traceback(proc)
    assert proc.returncode == 2 and unit in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
    untouched()
    assert g.run("sha256sum", unit, check=True).stdout == edited
    assert complete(g, 8106) == 6


def strays(g: Guest) -> list[str]:
    """llama-server processes in the guest that no unit owns (a killed deploy's preflight child, say)."""
    code = ("import os\n"
            "for p in filter(str.isdigit, os.listdir('/proc')):\n"
            "    try:\n"
            "        comm = open(f'/proc/{p}/comm').read().strip(); cg = open(f'/proc/{p}/cgroup').read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    if comm == 'llama-server' and '/system.slice/assemble-' not in cg:\n"
            "        print(p, open(f'/proc/{p}/cmdline').read().replace(chr(0), ' '))\n")
    return g.run("python3", "-c", code, check=True).stdout.splitlines()


def _kill_deploy(launcher: subprocess.Popen) -> bool:
    """SIGKILL the deploy's python process (a descendant of the host's nsenter), as `kill -9` would:
    its children are not signalled. False when it had already finished."""
    todo, found = [launcher.pid], None
    while todo and found is None:
        pid = todo.pop()
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for k in kids:
            try:
                cmd = Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"builder" in cmd and b"deploy" in cmd:
                found = int(k)
                break
            todo.append(int(k))
    if found is None:
        return False
    try:
        os.kill(found, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_sigkill_at_random_points_leaves_one_current_that_serves(systemd_guest, paths, seed):
    """SIGKILL of `assemble deploy` at seeded random instants of a switch (each seed: 4 kills over the
    measured length of an uninterrupted switch). After each: `current` is exactly one whole release,
    and it serves after `systemctl restart`; the next deploy goes through."""
    g = systemd_guest
    name, port = f"kill{seed}", 8120 + seed
    first(g, paths, name, port)
    args = ("--name", name, "--model", paths["model"], "--port", str(port), "--gate-timeout", str(GATE_TIMEOUT))
    start = time.monotonic()                                  # an uninterrupted switch, to know its length
    ok(deploy(g, paths["b"], *args))
    length = time.monotonic() - start
    rng = random.Random(seed)
    killed = 0
    for i in range(4):
        runtime = paths["a"] if "cpu2" in current(g, name) else paths["b"]
        delay = rng.uniform(0.0, length)
        launcher = subprocess.Popen(g.assemble_cmd("deploy", runtime, *args), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        killed += _kill_deploy(launcher)
        out, err = launcher.communicate(timeout=600)
        no_traceback(subprocess.CompletedProcess(launcher.args, launcher.returncode, out, err))
        # nothing the killed deploy started outlives it (its preflight server dies with it)
        deadline = time.monotonic() + 10
        while strays(g) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not strays(g), f"seed {seed} kill {i} at {delay:.2f}s: {strays(g)}"
        now = current(g, name)                                # exactly one whole release behind `current`
        links = g.run("find", f"/opt/assemble/{name}", "-maxdepth", "1", "-type", "l").stdout.split()
        assert links == [f"/opt/assemble/{name}/current"], links   # no half-renamed second link left
        g.systemctl("restart", f"assemble-{name}.service", check=True)
        assert complete(g, port) == 6, f"seed {seed} kill {i} at {delay:.2f}s of {length:.2f}s: {now} does not serve"
    assert killed >= 2, f"only {killed} of 4 kills landed inside a switch of {length:.1f}s"
    # the tool recovers: a whole deploy after the kills goes through and serves
    runtime = paths["a"] if "cpu2" in current(g, name) else paths["b"]
    ok(deploy(g, runtime, *args))
    assert complete(g, port) == 6


# --- when a switch fails (issue 48) ----------------------------------------------------------------------

class Probe(threading.Thread):
    """GET /health on the guest's loopback (the guest shares the host's network) ten times a second, each
    answer kept with its wall-clock time, as an operator's monitor would see the service."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.url, self.done = f"http://127.0.0.1:{port}/health", threading.Event()
        self.samples: list[tuple[float, bool]] = []

    def run(self) -> None:
        while not self.done.is_set():
            t = time.time()
            try:
                ok = requests.get(self.url, timeout=0.5).status_code == 200
            except requests.RequestException:
                ok = False
            self.samples.append((t, ok))
            self.done.wait(max(0.0, 0.1 - (time.time() - t)))

    def __enter__(self) -> Probe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.join(5)

    def outage(self) -> tuple[float, float, int]:
        """(first failed answer, first good answer after it, failed answers): the one outage seen."""
        down = next(t for t, ok in self.samples if not ok)
        up = next(t for t, ok in self.samples if ok and t > down)
        assert all(ok for t, ok in self.samples if t > up), "the service went down again"
        return down, up, sum(1 for t, ok in self.samples if not ok)


def first_failure(g: Guest, name: str, since: float) -> float:
    """When systemd saw the new release's main process fail (its journal line's own time)."""
    out = g.run("journalctl", "-u", f"assemble-{name}.service", "-o", "json", f"--since=@{since:.6f}",
                "--output-fields=MESSAGE", check=True).stdout
    for line in out.splitlines():
        entry = json.loads(line)
        if "Main process exited" in str(entry.get("MESSAGE")) and "status=15/TERM" not in str(entry.get("MESSAGE")):
            return int(entry["__REALTIME_TIMESTAMP"]) / 1e6
    raise AssertionError(f"no failure of assemble-{name}.service in its journal:\n{out[-3000:]}")


def failed_switch(g: Guest, paths: dict, name: str, port: int, *args: str, during=None) -> dict:
    """Deploy `args` over a serving release on `port` under a 10 Hz /health probe; the deploy must fail and
    roll back. `during(launcher)` runs while the deploy does. What was measured, for the asserts and the guide."""
    old = first(g, paths, name, port)
    with Probe(port) as probe:
        time.sleep(0.5)
        start = time.time()
        launcher = subprocess.Popen(g.assemble_cmd("deploy", paths["b"], "--name", name, *args), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        if during is not None:
            during(launcher)
        out, err = launcher.communicate(timeout=600)
        took = time.time() - start
        time.sleep(1.0)
    proc = subprocess.CompletedProcess(launcher.args, launcher.returncode, out, err)
    no_traceback(proc)
    assert proc.returncode == 1, proc.stderr
    assert "rolled back: the previous release serves again" in proc.stderr, proc.stderr
    assert current(g, name) == old and complete(g, port) == 6
    trash = g.run("ls", f"/opt/assemble/{name}/trash", check=True).stdout.split()
    assert len(trash) == 1 and trash[0].endswith(".failed") and "cpu2" in trash[0], trash
    down, up, failed = probe.outage()
    failure = first_failure(g, name, start)
    measured = {"deploy_s": round(took, 1), "outage_s": round(up - down, 1), "failed_probes": failed,
                "failure_to_serving_s": round(up - failure, 1), "error": proc.stderr.strip()}
    print(f"\n{name}: {json.dumps(measured)}")
    assert up - failure <= 5.0, measured            # the previous release serves within 5 s of the failure
    return measured


def test_a_truncated_model_is_out_at_its_first_crash(systemd_guest, paths):
    """The new release's model has its tensor data cut short: its header is whole (deploy's own check and the
    tiny preflight pass it), the server dies loading it. The gate fails at that first exit, not after its
    300 s timeout, quoting the server's own line, and the old release serves again."""
    g = systemd_guest
    m = failed_switch(g, paths, "cut", 8131, "--model", paths["truncated"], "--port", "8131")
    assert "gate failed at health: llama-server exited with status 1" in m["error"], m["error"]
    assert "the server said: " in m["error"] and "data is not within the file bounds" in m["error"], m["error"]
    assert m["deploy_s"] < 60, m


def test_a_privileged_port_is_out_at_its_first_crash(systemd_guest, paths):
    """The new release serves on port 80, which the unprivileged service user (no capabilities) cannot bind."""
    g = systemd_guest
    m = failed_switch(g, paths, "priv", 8132, "--model", paths["model"], "--port", "80")
    assert "couldn't bind HTTP server socket" in m["error"] and "port: 80" in m["error"], m["error"]


def test_a_restart_systemd_refuses_rolls_back(systemd_guest, paths):
    """The new release's model lies under /home, which the unit hides and shows the model alone by
    BindReadOnlyPaths=; the file is renamed away while the preflight runs, so systemd cannot set up the
    mount and `systemctl restart` itself fails: a failed gate at `restart`, quoting systemd, rolled back."""
    g = systemd_guest
    g.run("mkdir", "-p", "/home/op/models", check=True)
    g.run("cp", paths["model"], "/home/op/models/m.gguf", check=True)

    def move_model_away(launcher: subprocess.Popen) -> None:
        deadline = time.monotonic() + 120
        while not strays(g):                         # the preflight's server: the model was read, nothing stopped yet
            assert launcher.poll() is None and time.monotonic() < deadline, "no preflight seen"
            time.sleep(0.05)
        g.run("mv", "/home/op/models/m.gguf", "/home/op/models/gone.gguf", check=True)

    m = failed_switch(g, paths, "bind", 8133, "--model", "/home/op/models/m.gguf", "--port", "8133",
                      during=move_model_away)
    assert "gate failed at restart: `systemctl restart assemble-bind.service` failed" in m["error"], m["error"]
    assert "systemd said: " in m["error"] and "m.gguf" in m["error"], m["error"]


def test_model_paths_with_a_space_a_percent_a_colon_and_unicode_serve(systemd_guest, paths):
    """The model under /home (shown to the server by BindReadOnlyPaths=) in a folder and file named with a
    space, `%n` (a systemd specifier), a `:` (BindReadOnlyPaths='s separator) and non-ASCII letters: systemd
    reads the path back exactly, the unit starts and serves."""
    g = systemd_guest
    odd = "/home/op/my models %n/modèle: ü 1.gguf"
    g.run("mkdir", "-p", str(Path(odd).parent), check=True)
    g.run("cp", paths["model"], odd, check=True)
    ok(deploy(g, paths["a"], "--name", "odd", "--model", odd, "--port", "8134", "--gate-timeout", str(GATE_TIMEOUT)))
    assert complete(g, 8134) == 6
    shown = g.systemctl("show", "assemble-odd.service", "-p", "BindReadOnlyPaths", check=True).stdout.strip()
    assert shown == f"BindReadOnlyPaths={odd}:{odd}:rbind", shown


def test_a_redeploy_of_the_serving_release_restarts_nothing(systemd_guest, paths):
    g = systemd_guest
    old = first(g, paths, "same", 8135)
    before, entries = unit_show(g, "same"), tree_entries(g, "same")
    with Probe(8135) as probe:
        time.sleep(0.5)            # the probe runs half a second either side: a no-op redeploy is quick
        proc = ok(deploy(g, paths["a"], "--name", "same", "--model", paths["model"], "--port", "8135",
                         "--gate-timeout", str(GATE_TIMEOUT)))
        time.sleep(0.5)
    assert "nothing restarted" in proc.stderr and proc.stdout.strip() == old
    assert unit_show(g, "same") == before and current(g, "same") == old
    assert all(ok for _, ok in probe.samples) and len(probe.samples) > 5
    # every file as it was; the lock file holds the last locker's pid (written beside it and renamed, so its
    # folder's time moves with it)
    def files(e: dict[str, str]) -> dict[str, str]:
        return {p: v for p, v in e.items() if not p.endswith("/.lock") and p not in ("/opt/assemble/same",
                                                                                  "/opt/assemble/same/state")}
    assert files(tree_entries(g, "same")) == files(entries)


def test_loader_variables_are_refused(systemd_guest, paths):
    g = systemd_guest
    proc = deploy(g, paths["a"], "--name", "loader", "--model", paths["model"], "--env", "LD_PRELOAD=/tmp/x.so")
    no_traceback(proc)
    assert proc.returncode == 2 and "LD_PRELOAD is refused: it is read by the dynamic loader" in proc.stderr
    assert g.run("test", "-e", "/opt/assemble/loader").returncode != 0


def test_a_secret_reaches_the_server_as_a_credential_and_nowhere_else(systemd_guest, paths):
    """--secret api-key=FILE: the server answers 401 without the key and serves with it, the gate passed with it,
    and no file deploy wrote, no file another user (nobody) can read there, and no journal line holds it."""
    g = systemd_guest
    key = "sk-guest-7f3a9c0e5d1b42"
    g.run("sh", "-c", f"umask 077 && mkdir -p /etc/assemble && echo {key} > /etc/assemble/sec.key", check=True)
    ok(deploy(g, paths["a"], "--name", "sec", "--model", paths["model"], "--port", "8136", "--secret",
              "api-key=/etc/assemble/sec.key", "--gate-timeout", str(GATE_TIMEOUT)))
    ask = ("import json,sys,urllib.request as u,urllib.error as e\n"
           "h={'Content-Type':'application/json'}\n"
           "if len(sys.argv)>1: h['Authorization']='Bearer '+sys.argv[1]\n"
           "r=u.Request('http://127.0.0.1:8136/completion',data=b'{\"prompt\":\"Hi\",\"n_predict\":3}',headers=h)\n"
           "try: print(u.urlopen(r,timeout=30).status)\n"
           "except e.HTTPError as x: print(x.code)\n")
    assert g.run("python3", "-c", ask, check=True).stdout.strip() == "401"
    assert g.run("python3", "-c", ask, key, check=True).stdout.strip() == "200"
    assert status(g, "sec")["last_gate"]["result"]["passed"] is True
    places = ("/opt/assemble/sec", "/etc/systemd/system", "/etc/sysusers.d")
    assert g.run("grep", "-rlF", key, *places).returncode == 1                 # no file there holds it
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    assert g.run(*nobody, "cat", "/run/credentials/assemble-sec.service/api-key").returncode != 0
    journal = g.run("journalctl", "--no-pager", "-o", "cat").stdout
    assert key not in journal and f"api_keys: ****{key[-4:]}" in journal     # llama-server shows its last 4
    assert key not in ok(deploy(g, "--status", "sec", "--json")).stdout
