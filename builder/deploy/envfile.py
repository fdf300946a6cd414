"""The env file: every setting the server runs with, each with a comment saying what it sizes and why.

It is read twice and must mean the same both times: by systemd (EnvironmentFile=) and by bash (the serve
script sources it when started by hand). Values are written in single quotes, which both read literally;
a value holding a quote, a backslash or a control character is refused, never escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.deploy.model import ModelInfo
from builder.errors import AssembleError

KEY_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
_UNSAFE = re.compile(r"['\\\x00-\x1f\x7f]")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_CTX = 4096
GPU_BACKENDS = ("cuda", "vulkan", "hip")

# Keys an option owns: the switch waits on and gates the port, and refuses a missing model, so
# neither may be changed behind its back by --env.
OWNED = {"LLAMA_ARG_MODEL": "--model", "LLAMA_ARG_PORT": "--port"}

# The guards a serving host needs, by the backend that needs them, with the reason (one table).
GUARDS = {
    "cuda": (("GGML_CUDA_NO_PINNED", "1",
              ("never page-lock host memory for CPU-placed tensors: a tensor left on the CPU once landed in a "
               "pinned CUDA_Host buffer that page-locked 108 GiB and starved the host's other tenants")),),
}


@dataclass(frozen=True)
class EnvLine:
    key: str
    value: str
    why: str              # the comment above the line


@dataclass(frozen=True)
class EnvFile:
    lines: tuple[EnvLine, ...]

    def get(self, key: str) -> str | None:
        return next((ln.value for ln in self.lines if ln.key == key), None)

    def as_dict(self) -> dict[str, str]:
        return {ln.key: ln.value for ln in self.lines}

    def render(self) -> str:
        out = ["# Written by `assemble deploy`; the next deploy rewrites it (set values with --env KEY=VALUE).",
               "# Read by systemd (EnvironmentFile=) and by bash (the serve script, run by hand): KEY='value'."]
        for ln in self.lines:
            out += ["", *(f"# {part}" for part in _wrap(ln.why)), f"{ln.key}='{ln.value}'"]
        return "\n".join(out) + "\n"


def parse_env(items: list[str]) -> tuple[tuple[str, str], ...]:
    """--env KEY=VALUE items, checked: a variable name, a value both readers take literally, no key an option owns."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not KEY_RE.fullmatch(key):
            raise AssembleError(f"--env {item!r} is not KEY=VALUE with an upper-case variable name", where="--env",
                                fix="write e.g. --env LLAMA_ARG_CTX_SIZE=8192")
        if key in OWNED:
            raise AssembleError(f"--env {key} is set by {OWNED[key]} (the switch refuses, waits and gates on it)",
                                where="--env", fix=f"use {OWNED[key]} instead")
        check_value(key, value, "--env")
        out[key] = value
    return tuple(out.items())


def check_value(key: str, value: str, where: str) -> None:
    if bad := _UNSAFE.search(value):
        raise AssembleError(f"{key}'s value holds {bad.group()!r}, which systemd and bash would read differently",
                            where=where, fix="use a value without quotes, backslashes or control characters "
                                             "(for a path: rename it)")


def render_env(model: ModelInfo, model_path: str, port: int, backends: tuple[str, ...],
               extra: tuple[tuple[str, str], ...] = ()) -> EnvFile:
    """The env file for this model, port and runtime; `model_path` is the model as the host sees it."""
    check_value("LLAMA_ARG_MODEL", model_path, "--model")
    ctx = min(DEFAULT_CTX, model.n_ctx_train) if model.n_ctx_train else DEFAULT_CTX
    lines = [
        EnvLine("LLAMA_ARG_MODEL", model_path, f"the model ({_size(model.size)}); the serve script refuses to start "
                "without it"),
        EnvLine("LLAMA_ARG_HOST", DEFAULT_HOST, "listen on loopback only: put a proxy in front to serve others"),
        EnvLine("LLAMA_ARG_PORT", str(port), "the port the unit serves and deploy gates (--port)"),
        EnvLine("LLAMA_ARG_CTX_SIZE", str(ctx), _ctx_why(model, ctx)),
        EnvLine("LLAMA_ARG_N_PARALLEL", "1", "one slot: --parallel divides the context between slots, so each of N "
                "slots gets CTX_SIZE/N tokens"),
        EnvLine("LLAMA_ARG_LOG_VERBOSITY", "4", "the boot log names the devices found, the backend modules loaded and "
                "where the model's buffers went (deploy's gate and --status read it from the journal)"),
    ]
    gpu = [b for b in backends if b in GPU_BACKENDS]
    if gpu:
        lines.append(EnvLine("LLAMA_ARG_N_GPU_LAYERS", "999", f"every layer on the GPU ({', '.join(gpu)}); fewer "
                             f"leaves the rest on the CPU{_layers(model)}"))
    for backend in backends:
        lines += [EnvLine(k, v, why) for k, v, why in GUARDS.get(backend, ())]
    for key, value in extra:
        default = next((ln for ln in lines if ln.key == key), None)
        why = "set by --env" + (f" (default {default.value!r}: {default.why})" if default else "")
        lines = [ln for ln in lines if ln.key != key] + [EnvLine(key, value, why)]
    return EnvFile(tuple(lines))


def _ctx_why(model: ModelInfo, ctx: int) -> str:
    trained = f"the model was trained for {model.n_ctx_train}" if model.n_ctx_train else "the header names no trained context"
    kv = model.kv_bytes(ctx)
    cost = (f"; its KV cache (f16) takes {model.kv_bytes_per_token} bytes a token, {_size(kv)} at {ctx}"
            if kv is not None else "; the header lacks the numbers to size its KV cache")
    return f"context tokens for all slots together ({trained}){cost}; raise it only where memory allows"


def _layers(model: ModelInfo) -> str:
    return f" (the model has {model.n_layer} layers)" if model.n_layer else ""


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _wrap(text: str, width: int = 98) -> list[str]:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return lines + ([line] if line else [])
