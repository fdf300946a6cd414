"""The env file: every setting the server runs with, each with a comment saying what it sizes and why.

It is read twice and must mean the same both times: by systemd (EnvironmentFile=) and by bash (the serve
script sources it when started by hand). Values are written in single quotes, which both read literally;
a value holding a quote, a backslash or a control character is refused, never escaped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from builder.deploy.credentials import SECRETS, credential_path
from builder.deploy.model import ModelInfo
from builder.errors import AssembleError

KEY_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
_UNSAFE = re.compile(r"['\\\x00-\x1f\x7f\ud800-\udfff]")   # \ud800-\udfff: a byte that is not UTF-8
DEFAULT_HOST = "127.0.0.1"
DEFAULT_CTX = 4096
GPU_BACKENDS = ("cuda", "vulkan", "hip")


@dataclass(frozen=True)
class Refused:
    """A variable --env may not set (a glob of names), why, and what to do instead."""
    names: str
    why: str
    fix: str


# The one table of what --env refuses. The env file is read by systemd for the server and sourced by bash
# when the serve script runs by hand, and the serve script is bash: a variable that makes the dynamic loader,
# bash or ggml load or run code from outside the release would run it as the service user in every start.
# (No PYTHON* here: nothing in a release runs Python.) Keys an option owns and keys that would carry a secret
# are here too, so every refusal of --env is one row with its reason.
_LOADER = "use the runtime's own libraries (bundled with $ORIGIN RPATHs); rebuild or repair it instead"
ENV_POLICY = (
    Refused("LLAMA_ARG_MODEL", "is set by --model (the switch refuses a missing model and gates the one named)",
            "use --model instead"),
    Refused("LLAMA_ARG_PORT", "is set by --port (the switch waits for that port and gates it)", "use --port instead"),
    Refused("LLAMA_API_KEY", "would write the key into the env file and release.json, which every user can read",
            "use --secret api-key=FILE (systemd hands the file to the server as a credential)"),
    Refused("LLAMA_ARG_API_KEY", "would write the key into the env file and release.json, which every user can "
            "read", "use --secret api-key=FILE (systemd hands the file to the server as a credential)"),
    Refused("LLAMA_ARG_API_KEY_FILE", "is set by --secret api-key=FILE (the unit's credential, which the gate "
            "authenticates with)", "use --secret api-key=FILE instead"),
    Refused("LD_*", "is read by the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT load other code into "
            "llama-server)", _LOADER),
    Refused("GLIBC_TUNABLES", "is parsed by the dynamic loader before llama-server runs", _LOADER),
    Refused("GCONV_PATH", "makes glibc load iconv modules from the folder it names", _LOADER),
    Refused("GGML_BACKEND_PATH", "makes ggml load the backend module it names, from outside the release",
            "deploy a runtime that carries the backend (assemble build or repair)"),
    Refused("PATH", "decides which programs the serve script runs (systemd gives the unit its own)",
            "leave PATH to systemd"),
    Refused("BASH_ENV", "names a file bash runs before the serve script", "put nothing in front of the serve script"),
    Refused("ENV", "names a file a POSIX shell runs at start", "put nothing in front of the serve script"),
    Refused("BASH_FUNC_*", "defines bash functions that replace the serve script's commands",
            "put nothing in front of the serve script"),
    Refused("SHELLOPTS", "changes how bash runs the serve script", "put nothing in front of the serve script"),
    Refused("BASHOPTS", "changes how bash runs the serve script", "put nothing in front of the serve script"),
    Refused("IFS", "changes how bash splits the serve script's words", "put nothing in front of the serve script"),
)


def refused(key: str) -> Refused | None:
    """The rule of ENV_POLICY that refuses `key`, if one does."""
    return next((r for r in ENV_POLICY if fnmatchcase(key, r.names)), None)


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
        if rule := refused(key):
            raise AssembleError(f"--env {key} is refused: it {rule.why}", where="--env", fix=rule.fix)
        check_value(key, value, "--env")
        out[key] = value
    return tuple(out.items())


def check_value(key: str, value: str, where: str) -> None:
    if bad := _UNSAFE.search(value):
        raise AssembleError(f"{key}'s value holds {bad.group()!r}, which systemd and bash would read differently",
                            where=where, fix="use a value without quotes, backslashes, control characters or bytes "
                                             "that are not UTF-8 (for a path: rename it)")


def render_env(model: ModelInfo, model_path: str, port: int, backends: tuple[str, ...],
               extra: tuple[tuple[str, str], ...] = (), secrets: tuple[tuple[str, str], ...] = (),
               unit: str = "") -> EnvFile:
    """The env file for this model, port and runtime; `model_path` is the model as the host sees it;
    `secrets`: (NAME, FILE as the host sees it) of each --secret, passed to `unit` as its credentials."""
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
    for name, source in secrets:          # the file's path only (in the comment: another file is another release)
        kind = SECRETS[name]
        lines.append(EnvLine(kind.env, credential_path(unit, name), f"{kind.why}; systemd copies {source} there at "
                             f"each start (LoadCredential={name}:...), readable by the unit's user alone"))
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
