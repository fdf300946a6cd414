"""Run a runtime's own code to see what it can do on this host.

Every run uses an empty environment (plus variables the user names explicitly,
such as GGML_VK_VISIBLE_DEVICES for a CPU Vulkan driver) and a scratch working
directory, the way a service manager would start it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from builder.collect import module_backend

RUN_TIMEOUT = 120

# Probe one backend module in a clean process: load it as ggml would (RTLD_NOW),
# initialise its registry and list its devices through libggml-base's C API.
_PROBE = r"""
import ctypes, json, sys
runtime, module = sys.argv[1], sys.argv[2]
try:
    base = ctypes.CDLL(runtime + "/lib/libggml-base.so.0", mode=ctypes.RTLD_GLOBAL)
    mod = ctypes.CDLL(module, mode=ctypes.RTLD_LOCAL | 2)
except OSError as exc:
    print(json.dumps({"error": str(exc)})); sys.exit(0)
init = getattr(mod, "ggml_backend_init", None)
if init is None:
    print(json.dumps({"error": "no ggml_backend_init symbol"})); sys.exit(0)
init.restype = ctypes.c_void_p
reg = init()
if not reg:
    print(json.dumps({"devices": []})); sys.exit(0)
base.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]; base.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
base.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]; base.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
base.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]; base.ggml_backend_dev_name.restype = ctypes.c_char_p
base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]; base.ggml_backend_dev_type.restype = ctypes.c_int
names = []
for i in range(base.ggml_backend_reg_dev_count(reg)):
    dev = base.ggml_backend_reg_dev_get(reg, i)
    if base.ggml_backend_dev_type(dev) != 0:  # GGML_BACKEND_DEVICE_TYPE_CPU
        names.append(base.ggml_backend_dev_name(dev).decode())
print(json.dumps({"devices": names}))
"""


@dataclass(frozen=True)
class Probe:
    devices: tuple[str, ...] = ()
    error: str | None = None


def module_files(runtime: Path, backend: str) -> list[Path]:
    bindir = runtime / "bin"
    if not bindir.is_dir():
        return []
    return sorted(p for p in bindir.iterdir() if p.is_file() and module_backend(p.name) == backend)


def _run(argv: list[str], env: dict, cwd: Path, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=timeout)


def probe_module(runtime: Path, module: Path, env: dict) -> Probe:
    with tempfile.TemporaryDirectory(prefix="assemble-probe-") as cwd:
        try:
            proc = _run([sys.executable, "-c", _PROBE, str(runtime), str(module)], env, Path(cwd))
        except subprocess.TimeoutExpired:
            return Probe(error=f"loading {module.name} hung for {RUN_TIMEOUT}s")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Probe(error=f"loading {module.name} crashed (exit {proc.returncode}): {tail}")
    data = json.loads(lines[-1])
    if "error" in data:
        return Probe(error=data["error"])
    return Probe(devices=tuple(data["devices"]))


@dataclass(frozen=True)
class Listed:
    devices: list[str] = field(default_factory=list)
    error: str | None = None


_DEVICE_LINE = re.compile(r"^\s+([A-Za-z]+\d+): ")


def list_devices(runtime: Path, env: dict) -> Listed:
    with tempfile.TemporaryDirectory(prefix="assemble-neutral-") as cwd:
        try:
            proc = _run([str(runtime / "bin" / "llama-server"), "--list-devices"], env, Path(cwd))
        except subprocess.TimeoutExpired:
            return Listed(error=f"--list-devices hung for {RUN_TIMEOUT}s")
        except OSError as exc:
            return Listed(error=f"cannot start llama-server: {exc}")
    if proc.returncode != 0 or "Available devices" not in proc.stdout:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Listed(error=f"llama-server --list-devices exited {proc.returncode}: {tail}")
    return Listed([m.group(1) for ln in proc.stdout.splitlines() if (m := _DEVICE_LINE.match(ln))])


def loads_from_cwd(runtime: Path, env: dict) -> str | None | bool:
    """Start llama-server from a folder holding a planted libggml-cpu-*.so; report whether it was opened.

    The plant is a copy of the runtime's own CPU module; ld.so's own trace
    (LD_DEBUG=files) shows every file dlopen() maps, so no compiler is needed.
    Returns the planted path if it was loaded, False if not, None if untestable.
    """
    cpu = module_files(runtime, "cpu")
    if not cpu:
        return None
    with tempfile.TemporaryDirectory(prefix="assemble-planted-") as cwd:
        plant = Path(cwd) / "libggml-cpu-planted.so"
        shutil.copyfile(cpu[0], plant)
        try:
            proc = _run([str(runtime / "bin" / "llama-server"), "--list-devices"],
                        {**env, "LD_DEBUG": "files"}, Path(cwd))
        except (subprocess.TimeoutExpired, OSError):
            return None
        if "file=" not in proc.stderr:
            return None  # no ld.so trace (secure-execution mode): cannot tell
        return str(plant) if str(plant) in proc.stderr else False


@dataclass(frozen=True)
class Smoke:
    error: str | None = None
    predicted: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    foreign: tuple[str, ...] = ()
    log: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMOKE_PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)  # several hundred tokens


def foreign_libraries(pid: int, runtime: Path, owned_names: set[str]) -> tuple[str, ...]:
    """Mapped libraries that the runtime carries a copy of, but that came from elsewhere."""
    found = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ()
    root = str(runtime) + os.sep
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or ".so" not in parts[5]:
            continue
        path = parts[5].strip()
        if path.startswith(root):
            continue
        if Path(path).name in owned_names:
            found.add(path)
    return tuple(sorted(found))


def smoke(runtime: Path, model: Path, device_args: list[str], env: dict, timeout: float = 240) -> Smoke:
    """Start llama-server, wait for /health, send a real completion with a long prompt."""
    port = _free_port()
    owned = {p.name for p in (runtime / "lib").iterdir()} | {p.name for p in (runtime / "bin").iterdir()} \
        if (runtime / "lib").is_dir() else set()
    with tempfile.TemporaryDirectory(prefix="assemble-smoke-run-") as cwd:
        log_path = Path(cwd) / "server.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([str(runtime / "bin" / "llama-server"), "-m", str(model), "--host", "127.0.0.1",
                                     "--port", str(port), "-c", "2048", "-np", "1", *device_args],
                                    env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            start = time.monotonic()
            base = f"http://127.0.0.1:{port}"
            while True:
                if proc.poll() is not None:
                    return Smoke(error=f"llama-server exited {proc.returncode} before /health: "
                                 + _tail(log_path), log=None)
                try:
                    if requests.get(base + "/health", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.monotonic() - start > timeout:
                    return Smoke(error=f"/health not ok after {timeout:.0f}s: " + _tail(log_path))
                time.sleep(0.3)
            t0 = time.monotonic()
            try:
                resp = requests.post(base + "/completion", json={"prompt": SMOKE_PROMPT, "n_predict": 8,
                                                                  "temperature": 0, "cache_prompt": False},
                                     timeout=timeout)
            except requests.RequestException as exc:
                return Smoke(error=f"the first request failed ({exc.__class__.__name__}): " + _tail(log_path))
            seconds = time.monotonic() - t0
            if resp.status_code != 200:
                return Smoke(error=f"/completion answered {resp.status_code}: {resp.text[:200]}")
            body = resp.json()
            predicted = int(body.get("tokens_predicted", 0))
            prompt_tokens = int(body.get("tokens_evaluated", 0))
            if predicted < 1:
                return Smoke(error=f"no tokens generated: {json.dumps(body)[:200]}")
            foreign = foreign_libraries(proc.pid, runtime, owned)
            return Smoke(predicted=predicted, prompt_tokens=prompt_tokens, seconds=seconds, foreign=foreign)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])
