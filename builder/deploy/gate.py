"""The gate: a server is in service only once it answers /health, lists its model on /v1/models and
returns a real completion with exactly the tokens asked for. /health alone is not enough: a runtime
with its GPU data in the wrong place answers /health and dies on the first real request.

Also reads what the server says of itself in its boot log (journalctl for the unit, the log file for a
preflight): the devices it found, the backend modules it loaded, where the model's buffers went.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from builder.check.dynamic import ServerProcess, complete, wait_health
from builder.check.placement import read_log

N_PREDICT = 8
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


@dataclass(frozen=True)
class Devices:
    """What the server's boot log said (LLAMA_ARG_LOG_VERBOSITY=4 prints it)."""
    listed: tuple[str, ...] = ()          # "CPU: AMD EPYC (24105 MiB, 24105 MiB free)", "CUDA0: NVIDIA H200 (...)"
    backends: tuple[str, ...] = ()        # "CPU from /opt/assemble/NAME/releases/ID/runtime/bin/libggml-cpu-zen4.so"
    model_buffers: tuple[str, ...] = ()   # "CPU_Mapped 0.54 MiB", "CUDA0 1234.00 MiB"


@dataclass(frozen=True)
class GateResult:
    passed: bool
    step: str | None                  # the first step that failed: health, models, completion (None: passed)
    detail: str
    seconds: float
    predicted: int | None = None
    devices: Devices = field(default_factory=Devices)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"gate passed: {self.detail}" if self.passed else f"gate failed at {self.step}: {self.detail}"


def gate(host: str, port: int, model_names: tuple[str, ...], timeout: float, n_predict: int = N_PREDICT,
         proc: ServerProcess | None = None, api_key: str | None = None) -> GateResult:
    """Gate the server on host:port. `model_names`: what /v1/models may call the model (its path, its file
    name, an alias); `proc`: the server process when it is our child (its exit ends the wait)."""
    start = time.monotonic()
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    import requests                          # here: the CLI starts without loading it

    def failed(step: str, detail: str) -> GateResult:
        return GateResult(False, step, detail, time.monotonic() - start)

    if not_ready := wait_health(base, timeout, proc):
        return failed("health", not_ready)
    try:
        resp = requests.get(base + "/v1/models", headers=headers, timeout=30)
        ids = [m.get("id") for m in resp.json().get("data", [])] if resp.status_code == 200 else []
    except (requests.RequestException, ValueError, AttributeError) as exc:
        return failed("models", f"/v1/models did not answer ({type(exc).__name__})")
    if resp.status_code != 200:
        return failed("models", f"/v1/models answered {resp.status_code}: {resp.text[:200]}")
    if not any(i in model_names or str(i).rsplit("/", 1)[-1] in model_names for i in ids):
        return failed("models", f"/v1/models lists {ids or 'no model'}, not {model_names[0]}")
    left = max(5.0, timeout - (time.monotonic() - start))
    done = complete(base, PROMPT, n_predict, left, headers, ignore_eos=True)
    if done.died:
        return failed("completion", f"{done.error}: the server died or hung")
    if done.error:
        return failed("completion", done.error)
    if done.predicted != n_predict:
        return GateResult(False, "completion", f"asked for {n_predict} tokens, the answer carries {done.predicted}",
                          time.monotonic() - start, done.predicted)
    rate = done.predicted_per_second
    speed = f" at {rate:.1f} t/s" if rate is not None else ""
    return GateResult(True, None, f"/health, /v1/models ({ids[0]}) and a {n_predict}-token completion{speed}",
                      time.monotonic() - start, done.predicted)


_LISTED = re.compile(r"common_param:\s+- (\S+)\s*: (.+)$")
_BACKEND = re.compile(r"load_backend: loaded (\S+) backend from (\S+)")


def devices_from_log(text: str) -> Devices:
    listed, backends = [], []
    for line in text.splitlines():
        if m := _LISTED.search(line):
            listed.append(f"{m.group(1)}: {m.group(2).strip()}")
        elif m := _BACKEND.search(line):
            backends.append(f"{m.group(1)} from {m.group(2)}")
    buffers = [f"{b.name} {b.model:.2f} MiB" for b in read_log(text) if b.model]   # the one reader of buffer lines
    return Devices(*(tuple(dict.fromkeys(x)) for x in (listed, backends, buffers)))
