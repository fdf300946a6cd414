"""The placement check over real llama-server logs: lavapipe exposed twice (GGML_VK_VISIBLE_DEVICES=0,0, so
ggml lists Vulkan0 and Vulkan1, both llvmpipe) serving the tiny random models with `-lv 4`, recorded from the
suite's vulkan runtime at the pin (tests/data/placement/, how each was made in its name), and the H200 deploy
run's boot log (docs/results/). The model files are made again here: tinymodel writes them byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.check import gguffile, placement
from builder.check.placement import Buffers, Loaded, judge, offloadable_mib, read_log
from builder.check.report import FAIL, PASS
from builder.check.tinymodel import TINY, split_shape, write_tiny_llama
from builder.toolchain.gpus import CardMemory, parse_smi_memory

ROOT = Path(__file__).resolve().parents[3]
LOGS = ROOT / "tests" / "data" / "placement"
H200 = ROOT / "docs" / "results" / "h200-2026-12-01" / "deploy" / "serve-log-excerpt.txt"
PAIR = ("Vulkan0", "Vulkan1")


def loaded(name: str, ctx: int) -> Loaded:
    return Loaded(ctx, read_log((LOGS / f"lavapipe-2dev-{name}-c{ctx}.log").read_text()))


@pytest.fixture(scope="module")
def split_model(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("m") / "split.gguf", split_shape(2))


def test_the_log_gives_each_devices_model_kv_and_compute():
    small = loaded("8layers", 1024)
    assert small.of("Vulkan0") == Buffers("Vulkan0", 0.78, 1.25, 5.54)
    assert small.of("Vulkan1") == Buffers("Vulkan1", 0.58, 0.75, 5.54)
    assert small.of("CPU_Mapped") == Buffers("CPU_Mapped", model=0.11)           # the input layer stays on the CPU
    assert loaded("8layers", 4096).of("Vulkan0") == Buffers("Vulkan0", 0.78, 5.00, 17.54)


def test_the_h200_log_names_each_devices_card():
    buffers = {b.name: b for b in read_log(H200.read_text())}
    assert buffers["CUDA0"].model == 1008.19 and buffers["CUDA0"].pci == "0000:00:06.0"
    assert buffers["CPU_Mapped"].model == 72.52


def test_a_second_load_starts_the_count_again():
    text = (LOGS / "lavapipe-2dev-8layers-c1024.log").read_text()
    twice = {b.name: b for b in read_log(text + text)}
    assert twice["Vulkan0"].kv == 1.25 and twice["Vulkan1"].model == 0.58


def test_the_offloadable_bytes_leave_out_the_input_layer(split_model):
    sizes = gguffile.read(split_model).tensor_bytes()
    assert sum(sizes.values()) == split_model.stat().st_size - gguffile.read(split_model).data_start
    expected = (sum(sizes.values()) - sizes["token_embd.weight"]) / 2**20
    assert offloadable_mib(split_model) == pytest.approx(expected)
    # what the log says the two devices hold together, to the log's two decimals
    small = loaded("8layers", 1024)
    assert small.of("Vulkan0").model + small.of("Vulkan1").model == pytest.approx(expected, abs=0.02)


def test_a_real_split_passes_with_its_ratio_and_numbers(split_model):
    check = judge(PAIR, loaded("8layers", 1024), loaded("8layers", 4096), offloadable_mib(split_model))
    assert check.status == PASS, check
    assert "split Vulkan0 : Vulkan1 = 57:43 by weights" in check.reason
    # 5 and 3 of the 8 layers: 256 B a token a layer (64 K + 64 V values in f16)
    assert "Vulkan0 model 0.78 MiB, KV 1.25 -> 5.00 MiB (+1.25 KiB a token)" in check.reason
    assert "Vulkan1 model 0.58 MiB, KV 0.75 -> 3.00 MiB (+0.75 KiB a token)" in check.reason


def test_two_layers_leave_the_second_device_only_the_output_layer(tmp_path):
    """The real failure the check exists for: the split serves, but Vulkan1 holds no layer (llama.cpp splits
    n_layer + 1 layers, so TINY's two both land on Vulkan0)."""
    model = write_tiny_llama(tmp_path / "tiny.gguf", TINY)
    check = judge(PAIR, loaded("2layers", 1024), loaded("2layers", 4096), offloadable_mib(model))
    assert check.status == FAIL
    assert "Vulkan1 holds 0.11 MiB of weights but no KV cache at context 1024" in check.reason


def test_everything_on_one_device_fails(split_model):
    """--tensor-split 1,0: Vulkan0 holds every offloadable byte, Vulkan1 nothing."""
    small, large = loaded("8layers-ts1-0", 1024), loaded("8layers-ts1-0", 4096)
    whole = offloadable_mib(split_model)
    check = judge(PAIR, small, large, whole)
    assert check.status == FAIL and "Vulkan0 holds the whole model: 1.37 MiB of weights" in check.reason
    assert "(+1 more)" in check.reason
    empty = judge(("Vulkan1",), small, large, whole)       # the second problem on its own
    assert empty.status == FAIL and "Vulkan1 holds no model weights at context 1024" in empty.reason


def test_a_kv_that_does_not_grow_fails():
    same = loaded("8layers", 1024)
    check = judge(PAIR, same, Loaded(4096, same.buffers), None)
    assert check.status == FAIL
    assert "Vulkan0's KV did not grow with the context: 1.25 MiB at 1024, 1.25 MiB at 4096" in check.reason
    assert "(+1 more)" in check.reason


def test_the_cards_counters_are_reported_per_card():
    small = Loaded(1024, (Buffers("CUDA0", 500, 10, 5, "0000:00:06.0"), Buffers("Vulkan0", 400, 8, 5, "0000:00:06.0")),
                   (CardMemory("0000:00:06.0", 143771, 2000, "nvidia-smi"),))
    large = Loaded(4096, (Buffers("CUDA0", 500, 40, 9, "0000:00:06.0"), Buffers("Vulkan0", 400, 32, 9, "0000:00:06.0")),
                   (CardMemory("0000:00:06.0", 143771, 2080, "nvidia-smi"),))
    check = judge(("CUDA0", "Vulkan0"), small, large, 950.0)
    assert check.status == PASS
    assert "card 0000:00:06.0 (CUDA0+Vulkan0, nvidia-smi): 2000 -> 2080 MiB used of 143771" in check.reason


def test_the_contexts_differ_enough_for_the_kv_to_show():
    assert placement.CONTEXTS[1] >= 2 * placement.CONTEXTS[0]


# --- the H200: CUDA0 + Vulkan0 on one card, the cuda-vulkan runtime built there at the pin (2026-12-02) -------
# Each log is llama-server started as verify starts the split (empty environment plus the NVIDIA Vulkan ICD,
# --device CUDA0,Vulkan0 -ngl 99 --split-mode layer -lv 4), with nvidia-smi's pci.bus_id, memory.total and
# memory.used read while it was loaded (docs/results/h200-2026-12-02/placement/nvidia-smi-and-timings.txt).
H200_CARD = {("8layers", 1024): 724, ("8layers", 4096): 826, ("1b-f16", 1024): 2721, ("1b-f16", 4096): 2811}


def h200(name: str, ctx: int) -> Loaded:
    text = (LOGS / f"h200-cuda0-vulkan0-{name}-c{ctx}.log").read_text()
    smi = parse_smi_memory([["00000000:00:06.0", "143771 MiB", f"{H200_CARD[name, ctx]} MiB"]])
    return Loaded(ctx, read_log(text), smi)


def test_the_h200_split_of_verifys_model_is_proven(split_model):
    check = judge(("CUDA0", "Vulkan0"), h200("8layers", 1024), h200("8layers", 4096), offloadable_mib(split_model))
    assert check.status == PASS, check
    assert "split CUDA0 : Vulkan0 = 57:43 by weights (1.36 MiB of 1.37 MiB offloadable)" in check.reason
    assert "CUDA0 model 0.78 MiB, KV 1.25 -> 5.00 MiB (+1.25 KiB a token), compute 17.04 -> 65.54 MiB" in check.reason
    assert "card 0000:00:06.0 (CUDA0+Vulkan0, nvidia-smi): 724 -> 826 MiB used of 143771" in check.reason


def test_the_h200_split_of_the_1b_model_is_proven():
    """22 layers, 4 KV heads of 64: 1 KiB a token a layer; 12 layers on CUDA0, 10 on Vulkan0. The card's own
    counter grew by 90 MiB, what the log's KV (+36, +30) and compute (+12, +12) buffers add up to."""
    small, large = h200("1b-f16", 1024), h200("1b-f16", 4096)
    assert small.of("CUDA0") == Buffers("CUDA0", 1008.19, 12.00, 65.04, "0000:00:06.0")
    assert large.of("Vulkan0") == Buffers("Vulkan0", 912.68, 40.00, 73.04, "0000:00:06.0")
    check = judge(("CUDA0", "Vulkan0"), small, large, 1008.19 + 912.68)   # the 2 GB file is not made here
    assert check.status == PASS, check
    assert "split CUDA0 : Vulkan0 = 52:48 by weights" in check.reason
    assert "CUDA0 model 1008.19 MiB, KV 12.00 -> 48.00 MiB (+12.00 KiB a token)" in check.reason
    assert "Vulkan0 model 912.68 MiB, KV 10.00 -> 40.00 MiB (+10.00 KiB a token)" in check.reason
    assert "2721 -> 2811 MiB used" in check.reason
    grew = sum((large.of(d).kv + large.of(d).compute) - (small.of(d).kv + small.of(d).compute) for d in ("CUDA0", "Vulkan0"))
    assert grew == pytest.approx(2811 - 2721)
