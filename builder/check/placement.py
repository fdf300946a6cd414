"""Prove that a layer split really places the model on every device: read what each device holds from the
server's own log, at two context sizes.

llama.cpp logs each buffer it allocates (at verbosity 4, `-lv 4`), one line per buffer (the pin's source):
  load_tensors:        CUDA0 model buffer size =  1008.19 MiB      (src/llama-model.cpp, load_tensors)
  llama_kv_cache:    Vulkan1 KV buffer size =     0.75 MiB          (src/llama-kv-cache.cpp)
  sched_reserve:    Vulkan0 compute buffer size =     5.54 MiB      (src/llama-context.cpp)
  llama_prepare_model_devices: using device CUDA0 (NVIDIA H200) (0000:00:06.0) - 142579 MiB free  (src/llama.cpp)

The rules (the field notes: "prove it, do not assert it"):
- every device holds model weights and a KV cache: the KV cache lives with the layers, so a device with
  weights but no KV holds only the output layer, not a layer of the model;
- each device's KV grows with the context: raising the context adds KV to every card that holds layers;
- no device holds the whole model: its weights stay below the model's bytes that a GPU can hold (all
  tensors but the input layer, which llama.cpp keeps on the CPU: src/llama-model.cpp; with tied embeddings
  the GPU holding the output layer gets a copy of that matrix, so then all of them).
The cards' own counters (nvidia-smi, amdgpu's sysfs) are reported beside the log's numbers, never judged:
they count every process on the card, and two backends of one card (CUDA0 + Vulkan0) share them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder.check import gguffile
from builder.check.report import FAIL, PASS, Check
from builder.toolchain.gpus import CardMemory, pci_id

CONTEXTS = (1024, 4096)         # the two context sizes the split starts at: 4x apart, so each KV grows 4x
LOG_VERBOSITY = ["-lv", "4"]    # llama-server logs the buffer sizes at verbosity 4 (the default, 3, hides them)
INPUT_LAYER = "token_embd."     # the tensors llama.cpp never offloads ("always keep it on the CPU")

_MODEL = re.compile(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([\d.]+) MiB")
_KV = re.compile(r":\s+(\S+) KV buffer size\s*=\s*([\d.]+) MiB")
_COMPUTE = re.compile(r":\s+(\S+) compute buffer size\s*=\s*([\d.]+) MiB")
_USING = re.compile(r"using device (\S+) .*\((unknown id|[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\) "
                    r"- \d+ MiB free")
_LOADING = "load_tensors: loading model tensors"


@dataclass(frozen=True)
class Buffers:
    """What one device (or host buffer type: CPU_Mapped, Vulkan_Host) holds, in MiB as the log prints them."""
    name: str
    model: float = 0.0
    kv: float = 0.0
    compute: float = 0.0
    pci: str | None = None       # the card's PCI address (None: the backend gives no id, e.g. lavapipe)


@dataclass(frozen=True)
class Loaded:
    """One start of the split: its context size and what each buffer holds."""
    ctx: int
    buffers: tuple[Buffers, ...]
    cards: tuple[CardMemory, ...] = ()   # the cards' counters while it was loaded

    def of(self, name: str) -> Buffers | None:
        return next((b for b in self.buffers if b.name == name), None)


def read_log(text: str) -> tuple[Buffers, ...]:
    """Every buffer the log names, summed per name (a KV cache may come in several buffers, e.g. SWA).
    A new model load starts the count again: the last load is the one that serves."""
    sizes: dict[str, dict[str, float]] = {}
    pcis: dict[str, str] = {}
    for line in text.splitlines():
        if _LOADING in line:
            sizes = {}
        elif m := _USING.search(line):
            if m.group(2) != "unknown id":
                pcis[m.group(1)] = pci_id(m.group(2))
        else:
            for kind, pattern in (("model", _MODEL), ("kv", _KV), ("compute", _COMPUTE)):
                if m := pattern.search(line):
                    held = sizes.setdefault(m.group(1), {})
                    held[kind] = held.get(kind, 0.0) + float(m.group(2))
                    break
    return tuple(Buffers(name, s.get("model", 0.0), s.get("kv", 0.0), s.get("compute", 0.0), pcis.get(name))
                 for name, s in sizes.items())


def offloadable_mib(model: Path) -> float | None:
    """The model's bytes a GPU can hold: every tensor but the input layer (None: not a GGUF this can read)."""
    try:
        sizes = gguffile.read(model).tensor_bytes()
    except (OSError, gguffile.GGUFError):
        return None
    if "output.weight" not in sizes:     # tied embeddings: the output layer is a copy of the input layer's matrix
        return sum(sizes.values()) / 2**20
    return sum(n for name, n in sizes.items() if not name.startswith(INPUT_LAYER)) / 2**20


def judge(devices: tuple[str, ...], small: Loaded, large: Loaded, whole_mib: float | None,
          name: str = "placement") -> Check:
    """PASS when every device holds layers (weights and KV), each device's KV grows from the small context to
    the large one, and none holds the whole model; FAIL names the first device that does not."""
    problems = []
    for dev in devices:
        a, b = small.of(dev), large.of(dev)
        if a is None or a.model <= 0:
            problems.append(f"{dev} holds no model weights at context {small.ctx}")
        elif a.kv <= 0:
            problems.append(f"{dev} holds {a.model:.2f} MiB of weights but no KV cache at context {small.ctx}: "
                            "no layer of the model, only the output layer")
        elif b is None or b.kv <= a.kv:
            problems.append(f"{dev}'s KV did not grow with the context: {a.kv:.2f} MiB at {small.ctx}, "
                            f"{b.kv if b else 0:.2f} MiB at {large.ctx}")
        elif whole_mib is not None and a.model >= whole_mib - 0.01:     # the log rounds to 0.01 MiB
            problems.append(f"{dev} holds the whole model: {a.model:.2f} MiB of weights, the model's "
                            f"offloadable tensors are {whole_mib:.2f} MiB")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check(name, FAIL, f"the split is not real: {problems[0]}{more}; {_numbers(devices, small, large)}",
                     "give each device a share: --tensor-split, a model with more layers, or the devices' free memory")
    return Check(name, PASS, f"{_ratio(devices, small, whole_mib)}; {_numbers(devices, small, large)}"
                 + _cards(devices, small, large))


def _ratio(devices: tuple[str, ...], small: Loaded, whole_mib: float | None) -> str:
    held = [(small.of(d) or Buffers(d)).model for d in devices]
    total = sum(held) or 1.0
    share = ":".join(f"{100 * m / total:.0f}" for m in held)
    of = f" of {whole_mib:.2f} MiB offloadable" if whole_mib is not None else ""
    return f"split {' : '.join(devices)} = {share} by weights ({total:.2f} MiB{of}), every device holds layers"


def _numbers(devices: tuple[str, ...], small: Loaded, large: Loaded) -> str:
    parts = []
    for d in devices:
        a, b = small.of(d) or Buffers(d), large.of(d) or Buffers(d)
        model = f"{a.model:.2f}" if a.model == b.model else f"{a.model:.2f} -> {b.model:.2f}"
        per_token = (b.kv - a.kv) * 1024 / (large.ctx - small.ctx)
        grows = f" (+{per_token:.2f} KiB a token)" if per_token > 0 else ""
        parts.append(f"{d} model {model} MiB, KV {a.kv:.2f} -> {b.kv:.2f} MiB{grows}, "
                     f"compute {a.compute:.2f} -> {b.compute:.2f} MiB")
    return f"context {small.ctx} -> {large.ctx}: " + "; ".join(parts)


def _cards(devices: tuple[str, ...], small: Loaded, large: Loaded) -> str:
    """The cards' own counters for the cards the devices sit on (named in the log by PCI address)."""
    seen: dict[str, list[str]] = {}
    for d in devices:
        if (b := small.of(d)) is not None and b.pci:
            seen.setdefault(b.pci, []).append(d)
    notes = []
    for pci, on in seen.items():
        before = next((c for c in small.cards if c.pci == pci), None)
        after = next((c for c in large.cards if c.pci == pci), None)
        if before and after:
            notes.append(f"card {pci} ({'+'.join(on)}, {before.source}): {before.used_mib} -> {after.used_mib} "
                         f"MiB used of {before.total_mib}")
    return ("; " + "; ".join(notes)) if notes else ""
