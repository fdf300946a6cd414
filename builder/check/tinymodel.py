"""A llama-architecture GGUF with random weights, made on the spot.

The verifier's smoke test and the test suite need a real model file without a
download. The vocabulary is generated too: an SPM (llama) vocab with the three
control tokens, 256 byte-fallback tokens and printable words, so any prompt
tokenizes. Sizes are parameters: tiny for CI, >= 1B parameters for benchmarks.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np


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
        a, b = letters[i % 26], letters[(i // 26) % 26]
        words.append(("\u2581" if i % 2 else "") + a + b + (letters[(i // 676) % 26] if i >= 676 else ""))
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
    import gguf

    reader = gguf.GGUFReader(str(gguf_file))
    model = reader.fields["tokenizer.ggml.model"].contents()
    if model != "llama":
        raise ValueError(f"{gguf_file} has a {model!r} tokenizer; an SPM ('llama') vocab is needed")
    return (list(reader.fields["tokenizer.ggml.tokens"].contents()),
            [float(x) for x in reader.fields["tokenizer.ggml.scores"].contents()],
            [int(x) for x in reader.fields["tokenizer.ggml.token_type"].contents()])


def write_tiny_llama(path: Path, shape: ModelShape = TINY, seed: int = 0, dtype: str = "f32",
                     vocab_from: Path | None = None) -> Path:
    """Write a random-weight llama GGUF to `path` and return it."""
    import gguf  # heavy import, only when a model is made

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab_from(vocab_from) if vocab_from else _vocab(shape.n_vocab_words)
    n_vocab = len(tokens)
    head_dim = shape.n_embd // shape.n_head
    np_dtype = np.float16 if dtype == "f16" else np.float32

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name("assemble-random-llama")
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1 if dtype == "f16" else 0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def tensor(name: str, *shape_: int, ones: bool = False) -> None:
        if ones:
            data = np.ones(shape_, dtype=np.float32)  # norms stay f32, as converters write them
        else:
            data = (rng.standard_normal(shape_, dtype=np.float32) * 0.02).astype(np_dtype)
        w.add_tensor(name, data)

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

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path
