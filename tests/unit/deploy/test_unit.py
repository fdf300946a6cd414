"""The deployed unit and its service user, rendered and measured with the real systemd tools:
`systemd-analyze security --offline=yes` scores each backend set (goal <= 3.0 cpu, <= 4.0 GPU;
Debian's llama.cpp-services unit scores 9.2), every line parses, every relaxation names its
backend, and `systemd-sysusers` creates the user from the rendered line."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.deploy.unit import (MEMLOCK, UnitSpec, device_allow, render_sysusers, render_unit, service_user,
                                 unit_name)

BACKEND_SETS = {("cpu",): 3.0, ("cpu", "cuda"): 4.0, ("cpu", "vulkan"): 4.0, ("cpu", "hip"): 4.0,
                ("cpu", "cuda", "vulkan"): 4.0}


def spec(backends=("cpu",), model="/srv/models/m.gguf", name="chat") -> UnitSpec:
    return UnitSpec(name=name, user=service_user(name), base=Path(f"/opt/assemble/{name}"), backends=backends,
                    model=Path(model))


def exposure(text: str, tmp_path: Path) -> tuple[float, str]:
    """systemd-analyze's overall exposure of this unit text, and what it printed on stderr."""
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: the systemd package has it"
    unit = tmp_path / "assemble-chat.service"
    unit.write_text(text)
    proc = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(unit)], capture_output=True,
                          text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    return float(m.group(1)), proc.stderr


def settings(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


@pytest.mark.parametrize("backends", list(BACKEND_SETS), ids="+".join)
def test_exposure_score_within_goal_and_every_line_parses(backends, tmp_path):
    score, err = exposure(render_unit(spec(backends)), tmp_path)
    assert score <= BACKEND_SETS[backends], score
    # systemd warns on stderr about a key it does not know or a value it cannot parse
    # (a trailing '# comment' after a value is such a value): none may be ignored silently
    assert "Unknown" not in err and "Failed to parse" not in err and "Invalid" not in err, err


def test_a_weaker_unit_scores_worse(tmp_path):
    """The measurement is real: dropping the hardening block raises the score past Debian's range."""
    text = render_unit(spec())
    plain = "\n".join(line for line in text.splitlines()
                      if line.split("=", 1)[0] in ("[Unit]", "[Service]", "[Install]", "Description", "User",
                                                   "ExecStart", "EnvironmentFile", "WantedBy", "Group"))
    assert exposure(plain, tmp_path)[0] >= 9.0


def test_unit_names_current_release_and_user():
    text = render_unit(spec())
    s = settings(text)
    assert unit_name("chat") == "assemble-chat.service" and service_user("chat") == "assemble-chat"
    assert s["ExecStart"] == ["/opt/assemble/chat/current/serve"]
    assert s["EnvironmentFile"] == ["/opt/assemble/chat/current/env"]
    assert s["User"] == ["assemble-chat"] and s["Restart"] == ["on-failure"]
    assert s["LimitMEMLOCK"] == [MEMLOCK] and s["WantedBy"] == ["multi-user.target"]


def test_cpu_unit_is_closed():
    s = settings(render_unit(spec()))
    for key, value in {"DevicePolicy": "closed", "PrivateDevices": "yes", "MemoryDenyWriteExecute": "yes",
                       "ProtectSystem": "strict", "ProtectHome": "yes", "NoNewPrivileges": "yes",
                       "PrivateUsers": "yes", "ProcSubset": "pid", "CapabilityBoundingSet": ""}.items():
        assert s[key] == [value], key
    assert "DeviceAllow" not in s and device_allow(("cpu",)) == ()


def test_device_allow_is_exactly_the_backends_devices():
    cuda, vulkan, hip = device_allow(("cuda",)), device_allow(("vulkan",)), device_allow(("hip",))
    assert all("nvidia" in d for d in cuda) and cuda[0] == "char-nvidia rw"
    assert vulkan == ("char-drm rw",)
    assert hip == ("/dev/kfd rw", "char-drm rw")
    assert device_allow(("cpu", "cuda", "vulkan")) == cuda + vulkan
    assert device_allow(("vulkan", "hip")) == ("char-drm rw", "/dev/kfd rw")     # no line twice
    s = settings(render_unit(spec(("cpu", "cuda", "vulkan"))))
    assert s["DeviceAllow"] == list(cuda + vulkan) and s["DevicePolicy"] == ["closed"]


@pytest.mark.parametrize("backend", ["cuda", "vulkan", "hip"])
def test_each_relaxation_is_commented_with_the_backend_that_needs_it(backend):
    lines = render_unit(spec(("cpu", backend))).splitlines()
    relaxed = {"MemoryDenyWriteExecute=no", "ProcSubset=all", "PrivateDevices=no", "PrivateUsers=no"}
    seen = set()
    for i, line in enumerate(lines):
        if line in relaxed:
            seen.add(line)
            assert lines[i - 1].startswith("#"), line
            if line != "PrivateDevices=no":      # that one follows from the DeviceAllow= list itself
                assert f"{backend}:" in lines[i - 1], (line, lines[i - 1])
    assert {"MemoryDenyWriteExecute=no", "ProcSubset=all", "PrivateDevices=no"} <= seen
    assert ("PrivateUsers=no" in seen) == (backend != "cuda")   # the nvidia nodes are 0666: cuda keeps it


@pytest.mark.parametrize("model", ["/root/models/m.gguf", "/home/ann/m.gguf", "/run/user/1000/m.gguf"])
def test_model_under_a_home_is_bound_alone(model):
    s = settings(render_unit(spec(model=model)))
    assert s["ProtectHome"] == ["tmpfs"] and s["BindReadOnlyPaths"] == [model]
    assert "BindReadOnlyPaths" not in settings(render_unit(spec()))


@pytest.mark.parametrize("model", ["/tmp/m.gguf", "/var/tmp/x/m.gguf"])
def test_model_under_tmp_is_bound_into_the_private_tmp(model):
    s = settings(render_unit(spec(model=model)))
    assert s["PrivateTmp"] == ["yes"] and s["ProtectHome"] == ["yes"] and s["BindReadOnlyPaths"] == [model]
    assert "BindReadOnlyPaths" not in settings(render_unit(spec(model="/var/lib/models/m.gguf")))


def test_sysusers_line_creates_the_user(tmp_path):
    """The rendered sysusers.d file, applied by the real systemd-sysusers to an empty root."""
    assert shutil.which("systemd-sysusers"), "systemd-sysusers missing: the systemd package has it"
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    conf = tmp_path / "assemble-chat.conf"
    conf.write_text(render_sysusers(spec(("cpu", "vulkan"))))
    proc = subprocess.run(["systemd-sysusers", f"--root={root}", str(conf)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    user = next(line for line in (root / "etc/passwd").read_text().splitlines() if line.startswith("assemble-chat:"))
    assert user.endswith(":/:/usr/sbin/nologin") and int(user.split(":")[2]) < 1000
    group = (root / "etc/group").read_text()
    assert re.search(r"^render:x:\d+:assemble-chat$", group, re.M), group
    assert "render" not in render_sysusers(spec(("cpu", "cuda")))
