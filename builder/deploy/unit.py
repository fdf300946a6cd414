"""The systemd unit and the sysusers line of a deployed runtime.

The unit is hardened as far as GPU serving allows: everything a llama-server on the CPU does not
need is closed, and each setting a GPU backend needs relaxed is relaxed only for that backend, with
the reason beside it. `systemd-analyze security --offline=yes` measures it (tests/unit/deploy/
test_unit.py holds the numbers: <= 3.0 for cpu, <= 4.0 for a GPU runtime; Debian's
llama.cpp-services unit scores 9.2).

The unit names host paths (UnitSpec.base, UnitSpec.model): the caller passes them as the
running host sees them, not as a --root image holds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from builder.deploy.unitquote import exec_path, path_item, verbatim

# Backends a manifest may name; the GPU ones need device nodes.
CPU = "cpu"
GPU_BACKENDS = ("cuda", "vulkan", "hip")

# Device nodes per backend, as DeviceAllow= values. `char-NAME` is a driver name from
# /proc/devices (systemd matches it against that list), so every node of that driver is allowed
# whatever the number of cards; /dev/kfd is a fixed path. The NVIDIA names are those an H200
# host's /proc/devices lists (driver 5xx/6xx, 2026-12-01): 195 nvidia, 238 nvidia-uvm, 241 nvidia-caps.
_DEVICES = {
    "cuda": ("char-nvidia rw",            # /dev/nvidiactl, /dev/nvidia0..N, /dev/nvidia-modeset (major 195)
             "char-nvidia-uvm rw",        # /dev/nvidia-uvm(-tools): unified memory
             "char-nvidia-caps r"),       # /dev/nvidia-caps/*: MIG capabilities
    "vulkan": ("char-drm rw",),            # /dev/dri/renderD*, /dev/dri/card*
    "hip": ("/dev/kfd rw",                # the ROCm compute queue
            "char-drm rw"),               # /dev/dri/renderD*: the GPU's memory
}

# Group that owns the render nodes on Debian/Ubuntu (udev's default rules): 0660 root:render.
_DEVICE_GROUPS = {"vulkan": ("render", "video"), "hip": ("render", "video")}

# systemd's own default for services, written down so `--mlock` cannot page-lock a model: a
# locked model (or a pinned CUDA host buffer, guarded by GGML_CUDA_NO_PINNED in the env file)
# once page-locked 108 GiB and starved the host. llama-server warns and serves without mlock.
MEMLOCK = "8M"

_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")


@dataclass(frozen=True)
class UnitSpec:
    name: str                    # deploy NAME
    user: str                    # service user, "assemble-NAME"
    base: Path                   # host path of /opt/assemble/NAME
    backends: tuple[str, ...]    # from the runtime's manifest: "cpu", "cuda", "vulkan", "hip"
    model: Path                  # host path of the model
    credentials: tuple[tuple[str, str], ...] = ()   # --secret: (NAME, host path of FILE), as LoadCredential=


def unit_name(name: str) -> str:
    return f"assemble-{name}.service"


def service_user(name: str) -> str:
    return f"assemble-{name}"


def device_allow(backends: Iterable[str]) -> tuple[str, ...]:
    """DeviceAllow= values for exactly the devices these backends use (none for cpu)."""
    out: list[str] = []
    for b in backends:
        for d in _DEVICES.get(b, ()):
            if d not in out:
                out.append(d)
    return tuple(out)


def _gpu(spec: UnitSpec) -> tuple[str, ...]:
    return tuple(b for b in spec.backends if b in GPU_BACKENDS)


def _hidden(path: Path) -> str | None:
    """Which hardening setting would hide the model from the server: ProtectHome hides /home, /root
    and /run/user; PrivateTmp gives the server an empty /tmp and /var/tmp."""
    parts = path.parts[1:3]
    if parts[:1] in (("home",), ("root",)) or parts == ("run", "user"):
        return "ProtectHome"
    if parts[:1] == ("tmp",) or parts == ("var", "tmp"):
        return "PrivateTmp"
    return None


def render_unit(spec: UnitSpec) -> str:
    """The unit file's text: the runtime behind `current`, its env file, the hardening."""
    gpu = _gpu(spec)
    cuda, vulkan, hip = ("cuda" in gpu), ("vulkan" in gpu), ("hip" in gpu)
    current = spec.base / "current"
    state = f"assemble-{spec.name}"
    lines = [
        "# Written by assemble deploy; it rewrites this file on the next deploy of this name.",
        "[Unit]",
        f"Description=llama-server of assemble deploy {spec.name}",
        "After=network.target",
        "",
        "[Service]",
        "Type=exec",
        f"User={spec.user}",
        f"Group={spec.user}",
        f"EnvironmentFile={verbatim(f'{current}/env')}",
        f"ExecStart={exec_path(f'{current}/serve')}",
        "WorkingDirectory=/",
        "Restart=on-failure",
        "RestartSec=2",
        f"LimitMEMLOCK={MEMLOCK}",
        "UMask=0077",
        "",
        "# Hardening: the server reads its release and the model and listens on a socket.",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "AmbientCapabilities=",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "PrivateMounts=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "ProtectProc=invisible",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "RemoveIPC=yes",
        "KeyringMode=private",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
        "SystemCallFilter=~@privileged @resources",
        # a filtered call fails with EPERM instead of killing the server: ggml's thread priority
        # and NUMA calls (setpriority, mbind, sched_setaffinity) are optional and checked
        "SystemCallErrorNumber=EPERM",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "DevicePolicy=closed",
    ]
    # systemd copies each secret at start into a folder only the unit's user reads (the env file names it)
    lines += [f"LoadCredential={name}:{verbatim(path)}" for name, path in spec.credentials]
    hidden = _hidden(spec.model)
    if hidden == "ProtectHome":
        # The model lives under a home folder: the homes stay hidden, the model file alone is shown.
        lines += ["ProtectHome=tmpfs", f"BindReadOnlyPaths={path_item(str(spec.model))}"]
    else:
        lines += ["ProtectHome=yes"]
    if hidden == "PrivateTmp":
        # The model lives under /tmp: the private /tmp shows the model file alone.
        lines += [f"BindReadOnlyPaths={path_item(str(spec.model))}"]
    if not gpu:
        lines += ["PrivateDevices=yes", "PrivateUsers=yes", "ProcSubset=pid", "MemoryDenyWriteExecute=yes"]
        return "\n".join(lines + ["", "[Install]", "WantedBy=multi-user.target", ""])

    lines += ["", f"# Relaxed for the GPU backends ({', '.join(gpu)}):"]
    lines += [f"DeviceAllow={d}" for d in device_allow(gpu)]
    lines += ["# the GPU nodes above must be visible; DevicePolicy=closed still limits them to those",
              "PrivateDevices=no"]
    if vulkan or hip:
        lines += ["# " + "; ".join(f"{b}: /dev/dri/renderD* is 0660 root:render and a user namespace maps that group away"
                                 for b in gpu if b in _DEVICE_GROUPS), "PrivateUsers=no"]
    else:
        lines += ["PrivateUsers=yes"]
    lines += ["# " + "; ".join(
        r for r, on in (("cuda: libcuda reads /proc/driver/nvidia/params", cuda),
                        ("vulkan: the loader and Mesa read /proc/cpuinfo and /proc/meminfo", vulkan),
                        ("hip: ROCr reads /proc/cpuinfo and /proc/meminfo", hip)) if on), "ProcSubset=all"]
    lines += ["# " + "; ".join(
        r for r, on in (("cuda: the driver maps JIT-compiled PTX and its own trampolines writable+executable", cuda),
                        ("vulkan: Mesa's lavapipe/llvmpipe JIT-compiles shaders into W+X memory", vulkan),
                        ("hip: comgr/ROCr load code objects through W+X mappings", hip)) if on),
              "MemoryDenyWriteExecute=no"]
    # Driver shader/JIT caches (~/.nv/ComputeCache, Mesa's disk cache) need a writable home;
    # ProtectSystem=strict leaves none, so give them the unit's own cache folder.
    lines += [f"CacheDirectory={state}",
              f"Environment=XDG_CACHE_HOME=%C/{state} CUDA_CACHE_PATH=%C/{state}/nv"]
    return "\n".join(lines + ["", "[Install]", "WantedBy=multi-user.target", ""])


def render_sysusers(spec: UnitSpec) -> str:
    """sysusers.d lines: a system user and group of the unit's own, no login, no home; GPU
    backends that open /dev/dri join the groups owning its nodes (created if missing)."""
    lines = ["# Written by assemble deploy: the service user of " + unit_name(spec.name),
             f'u {spec.user} - "assemble deploy {spec.name}" / /usr/sbin/nologin']
    groups: list[str] = []
    for b in _gpu(spec):
        groups += [g for g in _DEVICE_GROUPS.get(b, ()) if g not in groups]
    lines += [f"m {spec.user} {g}" for g in groups]
    return "\n".join(lines) + "\n"
