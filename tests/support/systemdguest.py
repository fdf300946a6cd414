"""A real systemd 252 (Debian 12) booted in a container, for the deploy tests.

The root is debootstrapped once per machine into the test cache (built beside its final name and
renamed into place, under a lock, so a killed build never leaves a half root there) and booted with
`--volatile=overlay`: the cached folder is the read-only lower layer and every write of a test
lands in a tmpfs that vanishes at power-off, so tests never change the cache.

This host is not booted with systemd and has a hybrid cgroup v1 tree; shared/REFERENCE.md has the
measured recipe (`SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=0`, `--register=no`, `--keep-unit`; the guest
is driven with `nsenter` into its PID 1, as `machinectl` and `systemd-run -M` need a host systemd).

The checkout and the venv of the running interpreter (made from Debian 12's /usr/bin/python3) are
bound read-only at the same paths, so `python -m builder deploy ...` runs inside the guest with
Debian 12's own python3; `share` is a host folder bound read-write at SHARE_AT, where tests place
runtimes and models.

Cost, measured on this shared 2-core machine (2026-12-01): the cold debootstrap of the root (288 MiB)
took 2 min 57 s and 3 min 54 s (other jobs running); a warm boot to `running` about 1 s; power-off
0.3 s. The deploy tests' session setup (the cpu runtime from the warm build cache, its repaired twin,
the tiny model, the boot) took about 30 s.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.common import REPO, TEST_CACHE

SUITE = "bookworm"
# What the tests need inside: systemd as PID 1 with its bus, and Debian 12's python3 for the CLI.
PACKAGES = ("systemd", "dbus", "systemd-sysv", "python3")
ROOT = TEST_CACHE / f"systemd-{SUITE}"
SHARE_AT = Path("/srv/assemble-test")      # where the share folder appears in the guest
BOOT_TIMEOUT = 120


def mirror() -> str:
    """The Debian mirror this machine's apt uses (its sources file), so debootstrap goes where apt goes."""
    src = Path("/etc/apt/sources.list.d/debian.sources")
    if src.exists():
        for line in src.read_text().splitlines():
            if line.startswith("URIs:"):
                return line.split()[1]
    return "http://deb.debian.org/debian"


def guest_root() -> Path:
    """The cached Debian 12 root with systemd, made once per machine."""
    if (ROOT / "usr/lib/systemd/systemd").exists():
        return ROOT
    assert shutil.which("debootstrap"), "debootstrap missing: scripts/ci-setup.sh installs it"
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    with open(ROOT.parent / f".systemd-{SUITE}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # another worker may be building it
        if (ROOT / "usr/lib/systemd/systemd").exists():
            return ROOT
        partial = ROOT.parent / f".systemd-{SUITE}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        proc = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
                               str(partial), mirror()], capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, f"debootstrap failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        os.rename(partial, ROOT)
    return ROOT


@dataclass
class Guest:
    """A booted guest: `pid` is its systemd (PID 1 inside), `share` the host side of SHARE_AT."""
    nspawn: subprocess.Popen
    pid: int
    share: Path
    log: Path

    def at(self, host_path: Path) -> Path:
        """Where a file of the share folder appears inside the guest."""
        return SHARE_AT / Path(host_path).relative_to(self.share)

    def cmd(self, *args: str, env: dict | None = None, cwd: Path | str = "/") -> list[str]:
        """The host command line that runs `args` inside the guest with a clean environment."""
        base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
                "LANG": "C.UTF-8"}
        base.update(env or {})
        return ["nsenter", "-t", str(self.pid), "-a", "env", "-i", "-C", str(cwd),
                *[f"{k}={v}" for k, v in base.items()], *args]

    def run(self, *args: str, check: bool = False, timeout: float = 120, env: dict | None = None,
            cwd: Path | str = "/") -> subprocess.CompletedProcess:
        proc = subprocess.run(self.cmd(*args, env=env, cwd=cwd), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"in the guest: {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def systemctl(self, *args: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run("systemctl", *args, check=check, timeout=timeout)

    def assemble_cmd(self, *args: str) -> list[str]:
        """`python -m builder ARGS` inside the guest: Debian 12's python3 through the bound venv."""
        return self.cmd(str(Path(sys.prefix) / "bin" / "python"), "-m", "builder", *args, cwd=REPO,
                        env={"ASSEMBLE_CACHE": "/var/cache/assemble"})

    def assemble(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(self.assemble_cmd(*args), capture_output=True, text=True, timeout=timeout)

    def state(self) -> str:
        return self.systemctl("is-system-running").stdout.strip()

    def poweroff(self, timeout: float = 60) -> None:
        """Power the guest off; if it does not stop in time, kill its PID 1 (which ends its whole PID
        namespace) and then the nspawn process. Never leaves a guest running."""
        if self.nspawn.poll() is None:
            subprocess.run(self.cmd("systemctl", "poweroff"), capture_output=True, timeout=30)
            try:
                self.nspawn.wait(timeout)
            except subprocess.TimeoutExpired:
                for pid in (self.pid, self.nspawn.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.nspawn.wait(30)


def _guest_init(nspawn_pid: int) -> int | None:
    """The guest's systemd: a descendant of the nspawn process named `systemd`."""
    todo = [nspawn_pid]
    while todo:
        pid = todo.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for c in map(int, children):
            try:
                if Path(f"/proc/{c}/comm").read_text().strip() == "systemd":
                    return c
            except OSError:
                continue
            todo.append(c)
    return None


def boot(share: Path, binds_ro: tuple[Path, ...] = (), log: Path | None = None) -> Guest:
    """Boot the cached root (an overlay over it) with the checkout, the venv and `binds_ro` read-only
    at their own paths and `share` read-write at SHARE_AT; wait until systemd says running (or
    degraded), bounded by BOOT_TIMEOUT."""
    assert os.geteuid() == 0, "booting a systemd container needs root (CI runs as root)"
    assert shutil.which("systemd-nspawn"), "systemd-nspawn missing: scripts/ci-setup.sh installs systemd-container"
    assert Path(sys.base_prefix) == Path("/usr"), \
        f"the guest runs the CLI with Debian 12's python3: run the tests from a venv of /usr/bin/python3, not {sys.base_prefix}"
    root = guest_root()
    binds = {REPO, Path(sys.prefix), *binds_ro}
    args = ["systemd-nspawn", "-q", "--register=no", "--keep-unit", "-D", str(root), "--volatile=overlay",
            f"--bind={share}:{SHARE_AT}", *[f"--bind-ro={p}" for p in sorted(binds)], "--boot"]
    log = log or share / "guest-console.log"
    env = dict(os.environ, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="0")
    with open(log, "w") as out:
        nspawn = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    deadline = time.monotonic() + BOOT_TIMEOUT
    guest = None
    try:
        while True:
            assert nspawn.poll() is None, f"systemd-nspawn exited {nspawn.returncode}:\n{log.read_text()[-3000:]}"
            pid = (guest and guest.pid) or _guest_init(nspawn.pid)
            if pid and guest is None:
                guest = Guest(nspawn, pid, share, log)
            if guest and guest.state() in ("running", "degraded"):
                return guest
            assert time.monotonic() < deadline, f"the guest did not boot in {BOOT_TIMEOUT}s:\n{log.read_text()[-3000:]}"
            time.sleep(0.3)
    except BaseException:
        if guest:
            guest.poweroff(timeout=10)
        else:
            _kill(nspawn)
        raise


def _kill(nspawn: subprocess.Popen) -> None:
    """Kill a guest that never answered: its PID 1 first (that ends its PID namespace), then nspawn."""
    init = _guest_init(nspawn.pid)
    for pid in (init, nspawn.pid):
        if pid and nspawn.poll() is None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    nspawn.wait(30)
