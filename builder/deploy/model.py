"""The model a deploy serves: refused unless it is a GGUF file, and read for the numbers the env file's
comments size (trained context, layers, KV-cache bytes per token)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from builder.check import gguffile
from builder.errors import AssembleError

KV_BYTES = 2    # llama-server's default KV-cache type is f16 (--cache-type-k/-v)


@dataclass(frozen=True)
class ModelInfo:
    path: Path                       # absolute, on this machine
    size: int
    architecture: str | None
    n_layer: int | None
    n_ctx_train: int | None
    kv_bytes_per_token: int | None   # f16 K and V of every layer for one token; None when the header lacks it

    def kv_bytes(self, n_ctx: int) -> int | None:
        return None if self.kv_bytes_per_token is None else self.kv_bytes_per_token * n_ctx


def read_model(given: str | Path) -> ModelInfo:
    """The model, or a one-line refusal (exit 2): missing, not a file, not a GGUF file."""
    path = Path(os.path.abspath(Path(given).expanduser()))
    fix = "give the .gguf file the server should load: --model /path/to/model.gguf"
    if not path.exists():
        raise AssembleError("the model file does not exist", where=str(path), fix=fix)
    if not path.is_file():
        raise AssembleError("the model is not a regular file", where=str(path), fix=fix)
    try:
        meta = gguffile.read(path).metadata
    except gguffile.GGUFError as exc:
        raise AssembleError(f"the model is not a GGUF file this runtime can load ({exc})".replace(f"{path}: ", ""),
                            where=str(path), fix=fix) from None
    except OSError as exc:
        raise AssembleError(f"the model cannot be read ({exc.strerror or exc})", where=str(path), fix=fix) from None
    arch = name if isinstance(name := meta.get("general.architecture"), str) else None
    n_layer = _int(meta.get(f"{arch}.block_count"))
    return ModelInfo(path=path, size=path.stat().st_size, architecture=arch, n_layer=n_layer,
                     n_ctx_train=_int(meta.get(f"{arch}.context_length")), kv_bytes_per_token=_kv_per_token(meta, arch, n_layer))


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _kv_per_token(meta: dict[str, object], arch: str | None, n_layer: int | None) -> int | None:
    """K and V bytes for one token over all layers: per layer n_head_kv * (key_length + value_length) * 2;
    head lengths default to embedding_length / head_count as llama.cpp does. A per-layer head count (an
    array, 0 for a layer without attention) is summed layer by layer."""
    if arch is None or n_layer is None:
        return None
    n_head = meta.get(f"{arch}.attention.head_count")
    n_head = n_head[0] if isinstance(n_head, list) and n_head else n_head
    n_embd = _int(meta.get(f"{arch}.embedding_length"))
    default = n_embd // heads if n_embd and (heads := _int(n_head)) else None
    k_len = _int(meta.get(f"{arch}.attention.key_length")) or default
    v_len = _int(meta.get(f"{arch}.attention.value_length")) or default
    kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    per_layer = kv if isinstance(kv, list) else [kv] * n_layer
    if k_len is None or v_len is None or len(per_layer) != n_layer or not all(isinstance(h, int) for h in per_layer):
        return None
    return sum(per_layer) * (k_len + v_len) * KV_BYTES
