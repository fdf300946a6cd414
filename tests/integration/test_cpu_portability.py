"""The cpu runtime on CPUs it was not built on: Debian's qemu-user emulates older x86 models
(`qemu-x86_64 -cpu Nehalem`: SSE4.2, no AVX; `-cpu qemu64`: no SSE4.2), and ggml's loader must
pick the variant each can run, from a moved copy, with an empty environment, from another
working directory. On this machine's own CPU it must pick the best level shipped."""

from __future__ import annotations

import platform
import shutil
from pathlib import Path

import pytest

from builder.check import cpuvariant
from builder.check.report import FAIL, PASS
from builder.check.tinymodel import write_tiny_llama
from builder.config import cpulevels
from tests.support.server import complete, server

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the CPU levels are x86-64 ones"),
]

QEMU = shutil.which("qemu-x86_64")
needs_qemu = pytest.mark.usefixtures("qemu_present")
# The models' CPUID as qemu defines them (target/i386/cpu.c): what ggml's loader will see.
NEHALEM = frozenset({"sse", "sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16"})
QEMU64 = frozenset({"sse", "sse2", "pni", "cx16", "popcnt"})


@pytest.fixture(scope="session")
def qemu_present() -> None:
    """A missing qemu is a failed test, never a skipped one: scripts/test installs qemu-user."""
    assert QEMU, "qemu-x86_64 is missing: run scripts/ci-setup.sh (it installs qemu-user)"


@pytest.fixture(scope="module")
def moved(cpu_runtime, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("portable") / "moved here" / "runtime-cpu"
    shutil.copytree(cpu_runtime, dest, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def shipped(moved) -> tuple[str, ...]:
    levels = tuple(v for n in cpuvariant.shipped_modules(moved) if (v := cpulevels.variant_of(n)))
    assert {"x64", "sse42", "haswell"} <= set(levels), \
        f"the cpu recipe ships {cpuvariant.shipped_modules(moved)}: every x86 level is expected (variants = all)"
    return levels


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf")


def test_this_cpu_loads_the_best_level_shipped(moved, shipped):
    best = cpulevels.best_level(cpulevels.host_cpu_flags(), shipped)
    assert best is not None
    assert cpuvariant.loaded_cpu_module(moved, {}) == (f"libggml-cpu-{best.name}.so", None)
    check = cpuvariant.cpu_variant_check(moved, {})
    assert check.status == PASS, check


@needs_qemu
@pytest.mark.parametrize(("model", "flags", "expected"), [("Nehalem", NEHALEM, "sse42"), ("qemu64", QEMU64, "x64")])
def test_an_older_cpu_loads_the_level_it_can_run(moved, shipped, model, flags, expected):
    assert cpulevels.best_level(flags, shipped).name == expected
    assert cpuvariant.loaded_cpu_module(moved, {}, (QEMU, "-cpu", model)) == (f"libggml-cpu-{expected}.so", None)


@needs_qemu
def test_a_runtime_without_a_level_this_cpu_runs_has_no_cpu_backend(moved, shipped, tmp_path):
    # Only haswell kept (the former single level): on a CPU without AVX nothing loads, and the check says why.
    only = tmp_path / "only-haswell"
    shutil.copytree(moved, only, symlinks=True)
    for name in cpuvariant.shipped_modules(only):
        if name != "libggml-cpu-haswell.so":
            (only / "bin" / name).unlink()
    seen = cpuvariant.observe(only, {}, (QEMU, "-cpu", "Nehalem"))
    assert (seen.module, seen.reason) == (None, cpuvariant.NOT_LOADED)
    check = cpuvariant.judge(cpuvariant.shipped_modules(only), seen, NEHALEM)
    assert check.status == FAIL and "haswell, needs avx avx2 bmi2 f16c fma" in check.reason


@needs_qemu
def test_a_cpu_without_avx_serves_a_completion(moved, shipped, tiny, tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with server(moved, tiny, ["-c", "256"], {}, cwd, timeout=60, wrapper=(QEMU, "-cpu", "Nehalem")) as (base, proc, _):
        body = complete(base, n=4)
        # qemu-user maps the guest's libraries into its own process: the one CPU module there is the answer.
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
    assert body["tokens_predicted"] == 4 and body["content"]
    mapped = {Path(ln.split(None, 5)[5]).name for ln in maps.splitlines()
              if len(ln.split(None, 5)) == 6 and "/libggml-cpu" in ln}
    assert mapped == {"libggml-cpu-sse42.so"}
    assert str(moved / "bin" / "libggml-cpu-sse42.so") in maps
