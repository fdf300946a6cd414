"""A llama-architecture GGUF with random weights, made on the spot.

The verifier's smoke test and the test suite need a real model file without a
download. The vocabulary is generated too: an SPM (llama) vocab with the three
control tokens, 256 byte-fallback tokens and printable words, so any prompt
tokenizes. Sizes are parameters: tiny for CI, >= 1B parameters for benchmarks.

Written with the standard library (builder.check.gguffile): no numpy, no gguf package at run
time. The weights are one block of seeded Gaussian values (sigma 0.02, never NaN or Inf) in the
tensor's type, tiled through each tensor from a different start: a tiny model is wholly random,
a 1B one repeats a 64 K-value pattern, which costs a speed benchmark nothing and lets it be
written at disk speed.
"""

from __future__ import annotations

import random
import string
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, cast

from builder.check import gguffile as G


@dataclass(frozen=True)
class ModelShape:
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 128
    n_ctx: int = 4096
    n_vocab_words: int = 200   # printable tokens besides the control and byte tokens

    def params(self) -> int:
        vocab = 3 + 256 + self.n_vocab_words
        head_dim = self.n_embd // self.n_head
        attn = self.n_embd * self.n_embd * 2 + self.n_embd * head_dim * self.n_head_kv * 2
        ffn = 3 * self.n_embd * self.n_ff
        return 2 * vocab * self.n_embd + self.n_layer * (attn + ffn + 2 * self.n_embd) + self.n_embd


TINY = ModelShape()
# verify's layer split: llama.cpp splits n_layer + 1 layers (the output layer counts) in proportion to the devices'
# free memory, so TINY's 2 layers put both on the first device and leave the second only the output layer. Eight
# layers give each of two devices several (5 + 3 with the output layer on equal devices) and a KV cache that the
# log's two decimals show growing: 64 x 2 x 2 B a token per layer, 1.25 -> 5.00 MiB from context 1024 to 4096.
SPLIT = ModelShape(n_layer=8)


def split_shape(n_devices: int) -> ModelShape:
    """SPLIT, with four layers a device beyond two devices (so the last never gets the output layer alone)."""
    return ModelShape(n_layer=max(SPLIT.n_layer, 4 * n_devices))
# ~1.1B parameters (llama-style 1B shape); used by the hardware acceptance runs.
ONE_B = ModelShape(n_layer=22, n_embd=2048, n_head=32, n_head_kv=4, n_ff=5632, n_ctx=8192, n_vocab_words=31741)


def _vocab(n_words: int) -> tuple[list[str], list[float], list[int]]:
    # token types: 1 normal, 2 unknown, 3 control, 6 byte
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    letters = string.ascii_lowercase
    words = ["\u2581" + c for c in letters] + list(letters) + ["\u2581"]
    i = 0
    while len(words) < n_words:  # deterministic two/three-letter pieces
        first, second = letters[i % 26], letters[(i // 26) % 26]
        words.append(("\u2581" if i % 2 else "") + first + second + (letters[(i // 676) % 26] if i >= 676 else ""))
        i += 1
    seen = set(tokens)
    for rank, w in enumerate(words[:n_words]):
        if w in seen:
            continue
        seen.add(w)
        tokens.append(w)
        scores.append(-float(rank))
        types.append(1)
    return tokens, scores, types


def _vocab_from(gguf_file: Path) -> tuple[list[str], list[float], list[int]]:
    """The SPM vocabulary of an existing GGUF (e.g. llama.cpp's models/ggml-vocab-llama-spm.gguf)."""
    meta = G.read(gguf_file).metadata
    model = meta.get("tokenizer.ggml.model")
    if model != "llama":
        raise ValueError(f"{gguf_file} has a {model!r} tokenizer; an SPM ('llama') vocab is needed")
    tokens, scores, kinds = (cast(list[Any], meta[k]) for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                                                "tokenizer.ggml.token_type"))   # arrays, by GGUF's spec
    return list(tokens), [float(x) for x in scores], [int(x) for x in kinds]


# --- the weights ----------------------------------------------------------------------------

BLOCKS = 2039          # groups of 32 values in the random block (a prime: tiled rows rarely repeat)
_FILE_TYPE = {G.F32: 0, G.F16: 1, G.Q4_0: 2, G.Q8_0: 7}   # llama.cpp's LLAMA_FTYPE_ALL_F32, MOSTLY_F16, ...


def _q8_0(values: list[float]) -> bytes:
    """ggml's Q8_0: per 32 values an f16 scale d = max|x| / 127 and 32 signed bytes round(x / d)."""
    out = bytearray()
    for i in range(0, len(values), 32):
        xs = values[i:i + 32]
        d = max(abs(x) for x in xs) / 127
        d = struct.unpack("<e", struct.pack("<e", d))[0]      # the scale as stored
        out += struct.pack("<e32b", d, *(max(-127, min(127, round(x / d))) if d else 0 for x in xs))
    return bytes(out)


def _q4_0(values: list[float]) -> bytes:
    """ggml's Q4_0: per 32 values an f16 scale d = (the value of largest magnitude) / -8 and 32
    nibbles q = x / d + 8 in 0..15; byte j holds value j (low nibble) and value j + 16 (high)."""
    out = bytearray()
    for i in range(0, len(values), 32):
        xs = values[i:i + 32]
        d = max(xs, key=abs) / -8
        d = struct.unpack("<e", struct.pack("<e", d))[0]
        q = [max(0, min(15, int(x / d + 8.5))) if d else 8 for x in xs]
        out += struct.pack("<e", d) + bytes(q[j] | q[j + 16] << 4 for j in range(16))
    return bytes(out)


@cache
def _random_block(seed: int, dtype: str) -> bytes:
    """BLOCKS * 32 Gaussian values (sigma 0.02), encoded as dtype."""
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 0.02) for _ in range(BLOCKS * 32)]
    if dtype == G.Q8_0:
        return _q8_0(values)
    if dtype == G.Q4_0:
        return _q4_0(values)
    return struct.pack(f"<{len(values)}{'e' if dtype == G.F16 else 'f'}", *values)


def _tiled(block: bytes, start: int) -> Callable[[BinaryIO, int], None]:
    """A writer of n bytes of `block` repeated, beginning at byte `start`."""
    turned = block[start:] + block[:start]

    def write(f: BinaryIO, n: int) -> None:
        reps = min(max(1, (16 << 20) // len(turned)), -(-n // len(turned)))   # up to ~16 MiB per write
        chunk = memoryview(turned * reps)
        while n:
            k = min(n, len(chunk))
            f.write(chunk[:k])
            n -= k
    return write


def _ones(f: BinaryIO, n: int) -> None:
    f.write(struct.pack("<f", 1.0) * (n // 4))


def write_tiny_llama(path: Path, shape: ModelShape = TINY, seed: int = 0, dtype: str = "f32",
                     vocab_from: Path | None = None) -> Path:
    """Write a random-weight llama GGUF to `path` and return it. dtype is the matrices' type: f32, f16,
    q8_0 or q4_0 (norms stay f32, as converters write them)."""
    if dtype not in _FILE_TYPE:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(_FILE_TYPE)}")
    tokens, scores, types = _vocab_from(vocab_from) if vocab_from else _vocab(shape.n_vocab_words)
    n_vocab = len(tokens)
    head_dim = shape.n_embd // shape.n_head
    def u32(v: int) -> G.Value:
        return G.Value(G.UINT32, v)

    metadata = [
        ("general.architecture", G.Value(G.STRING, "llama")),
        ("general.name", G.Value(G.STRING, "assemble-random-llama")),
        ("llama.context_length", u32(shape.n_ctx)),
        ("llama.embedding_length", u32(shape.n_embd)),
        ("llama.block_count", u32(shape.n_layer)),
        ("llama.feed_forward_length", u32(shape.n_ff)),
        ("llama.attention.head_count", u32(shape.n_head)),
        ("llama.attention.head_count_kv", u32(shape.n_head_kv)),
        ("llama.rope.dimension_count", u32(head_dim)),
        ("llama.attention.layer_norm_rms_epsilon", G.Value(G.FLOAT32, 1e-5)),
        ("general.file_type", u32(_FILE_TYPE[dtype])),
        ("tokenizer.ggml.model", G.Value(G.STRING, "llama")),
        ("tokenizer.ggml.tokens", G.Value(G.ARRAY, tokens, G.STRING)),
        ("tokenizer.ggml.scores", G.Value(G.ARRAY, scores, G.FLOAT32)),
        ("tokenizer.ggml.token_type", G.Value(G.ARRAY, types, G.INT32)),
        ("tokenizer.ggml.bos_token_id", u32(1)),
        ("tokenizer.ggml.eos_token_id", u32(2)),
        ("tokenizer.ggml.unknown_token_id", u32(0)),
        ("tokenizer.ggml.add_bos_token", G.Value(G.BOOL, True)),
    ]
    block = _random_block(seed, dtype)
    unit = len(block) // BLOCKS              # bytes of 32 values
    tensors: list[G.Tensor] = []

    def tensor(name: str, *shape_: int, ones: bool = False) -> None:
        if ones:
            tensors.append(G.Tensor(name, shape_, G.F32, _ones))
        else:   # each matrix starts elsewhere in the block
            tensors.append(G.Tensor(name, shape_, dtype, _tiled(block, (len(tensors) * 977 % BLOCKS) * unit)))

    tensor("token_embd.weight", n_vocab, shape.n_embd)
    for i in range(shape.n_layer):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", shape.n_embd, ones=True)
        tensor(p + "attn_q.weight", shape.n_embd, shape.n_embd)
        tensor(p + "attn_k.weight", head_dim * shape.n_head_kv, shape.n_embd)
        tensor(p + "attn_v.weight", head_dim * shape.n_head_kv, shape.n_embd)
        tensor(p + "attn_output.weight", shape.n_embd, shape.n_embd)
        tensor(p + "ffn_norm.weight", shape.n_embd, ones=True)
        tensor(p + "ffn_gate.weight", shape.n_ff, shape.n_embd)
        tensor(p + "ffn_up.weight", shape.n_ff, shape.n_embd)
        tensor(p + "ffn_down.weight", shape.n_embd, shape.n_ff)
    tensor("output_norm.weight", shape.n_embd, ones=True)
    tensor("output.weight", n_vocab, shape.n_embd)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        G.write(tmp, metadata, tensors)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
