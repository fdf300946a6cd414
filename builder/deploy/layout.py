"""The host tree: the one home of where deploy puts everything.

    ROOT/opt/assemble/NAME/
      .lock                      flock: one deploy of NAME at a time
      current -> releases/ID     the release the unit serves (a symlink, switched atomically)
      releases/ID/               one deployed runtime with its configuration
        runtime/                 a copy of the runtime folder (manifest.json inside)
        env                      LLAMA_ARG_* and the guards, each with why
        serve                    the bash script the unit runs
        release.json             what was deployed: runtime identity, model, port, env, time
      releases/ID.partial-XXXX/  a release being copied (never current; cleaned at the next run)
      trash/ID.TIMESTAMP[.failed|.unused]  releases moved out of service (renamed, never deleted in a
                                 switch); .failed: it failed its gate; .unused: never served;
                                 runtime files identical across releases are hard links (deploy.shared)
      state/ledger.json          every path deploy made here and outside (unit, sysusers), with its hash
      state/gate.json            the last gate: when, which release, the result, the devices
      state/switch.json          a switch in progress (from, to): present only while one runs
    ROOT/etc/systemd/system/assemble-NAME.service
    ROOT/etc/sysusers.d/assemble-NAME.conf

ROOT is `/` on the live host, or --root DIR for an image; what the unit and the env file name are
host paths (`host_path`), never --root paths. Under --root the three folders deploy writes into
(opt/assemble/NAME, etc/systemd/system, etc/sysusers.d) are resolved inside the image
(builder.deploy.inroot: an image's absolute link is read from its root, never followed onto this
machine), and deploy's own folders in the tree must not be links at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.deploy.inroot import inside
from builder.deploy.unit import service_user, unit_name
from builder.errors import AssembleError

# A deploy NAME becomes a unit name and the user assemble-NAME: systemd-sysusers 252 refuses a user name
# of 32 characters ("not a valid user or group name") and takes 31, so NAME has at most 22.
NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,21}")
BASE = Path("opt/assemble")
UNITS, SYSUSERS = Path("etc/systemd/system"), Path("etc/sysusers.d")
PARTIAL_TAG = ".partial-"
FAILED_SUFFIX = ".failed"     # failed its gate
UNUSED_SUFFIX = ".unused"     # copied by a run that stopped (killed, port held) before it served
RUNTIME, ENV, SERVE, RECORD = "runtime", "env", "serve", "release.json"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise AssembleError(f"deploy name {name!r} is not a lower-case name of 1 to 22 letters, digits and '-' "
                            "starting with a letter (it becomes the unit assemble-NAME.service and its user)",
                            where="--name", fix="write e.g. --name chat")
    return name


@dataclass(frozen=True)
class HostTree:
    root: Path          # "/" on the live host; --root DIR for an image or a chroot (a real path)
    name: str
    base: Path = field(init=False, compare=False)          # ROOT/opt/assemble/NAME, resolved inside ROOT
    units: Path = field(init=False, compare=False, repr=False)     # ROOT/etc/systemd/system, likewise
    users: Path = field(init=False, compare=False, repr=False)     # ROOT/etc/sysusers.d, likewise

    def __post_init__(self) -> None:
        check_name(self.name)
        live = self.root == Path("/")
        for attr, rel in (("base", BASE / self.name), ("units", UNITS), ("users", SYSUSERS)):
            object.__setattr__(self, attr, self.root / rel if live else inside(self.root, rel.as_posix()))
        if not live:
            for own in (self.lock, self.releases, self.trash, self.state, self.ledger, self.gate_record,
                        self.switch_record):
                if own.is_symlink():
                    raise AssembleError("a folder or file of deploy's own tree is a link in the image; deploy "
                                        "writes through no link it did not make", where=str(own),
                                        fix="remove the link (deploy makes the folder itself)")

    @property
    def lock(self) -> Path:
        return self.base / ".lock"

    @property
    def releases(self) -> Path:
        return self.base / "releases"

    def release(self, release_id: str) -> Path:
        return self.releases / release_id

    @property
    def current(self) -> Path:
        return self.base / "current"

    @property
    def trash(self) -> Path:
        return self.base / "trash"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def ledger(self) -> Path:
        return self.state / "ledger.json"

    @property
    def gate_record(self) -> Path:
        return self.state / "gate.json"

    @property
    def switch_record(self) -> Path:
        return self.state / "switch.json"

    @property
    def unit_name(self) -> str:
        return unit_name(self.name)

    @property
    def user(self) -> str:
        return service_user(self.name)

    @property
    def unit(self) -> Path:
        return self.units / self.unit_name

    @property
    def sysusers(self) -> Path:
        return self.users / f"{self.user}.conf"

    def host_path(self, p: Path) -> Path:
        """The path as the running host sees it: without --root."""
        return Path("/") / Path(p).relative_to(self.root)

    def current_id(self) -> str | None:
        """The release `current` points at (None: no current yet)."""
        try:
            target = Path(self.current.readlink())
        except (FileNotFoundError, OSError):
            return None
        return target.name if target.parent == Path("releases") else None

    def current_target(self, release_id: str) -> str:
        """What `current` holds: relative, so the tree works under any --root."""
        return f"releases/{release_id}"
