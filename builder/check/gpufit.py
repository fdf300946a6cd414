"""Does the runtime's GPU code fit a card and a driver: the CUDA code objects against the cards
asked for (--cuda-arch) or seen here, the CUDA runtime carried against the NVIDIA driver here,
and a module that reports no device on a host that has such a card.
"""

from __future__ import annotations

from pathlib import Path

from builder.toolchain.gpus import AmdHost, NvidiaHost
from builder.check.report import FAIL, PASS, SKIP, Check
from builder.errors import AssembleError
from builder.config.drivers import driver_at_least
from builder.config.targets import CudaArch
from builder.runtime.cudacode import CudaCode, needs_jit, read_cuda_code, runs_on
from builder.runtime.gpuruntime import CudaRuntimeRecord, RocmRecord


def _cap_text(cap: int) -> str:
    return f"{cap // 10}.{cap % 10}"


def cuda_code_checks(runtime: Path, modules: list[Path], wanted: tuple[CudaArch, ...],
                     host: NvidiaHost | None) -> list[Check]:
    """One check per CUDA module: the cards asked for and the cards here must each have SASS or PTX."""
    checks = []
    cards = [(a.number, f"--cuda-arch {a}") for a in wanted]
    if host is not None:
        cards += [(g.capability, f"{g.name} here") for g in host.gpus if g.capability is not None]
    for module in modules:
        rel = module.relative_to(runtime).as_posix()
        try:
            code = read_cuda_code(module)
        except AssembleError as exc:
            checks.append(Check(f"CUDA code {module.name}", FAIL, f"{rel}: {exc.what}", "rebuild or re-copy the runtime"))
            continue
        if code is None:
            checks.append(Check(f"CUDA code {module.name}", FAIL, f"{rel} carries no CUDA code objects (.nv_fatbin)",
                                "rebuild it: a CUDA module without device code runs on no card"))
            continue
        listed = _listing(code)
        misses = [(cap, who, why) for cap, who in cards for ok, why in [runs_on(code, cap)] if not ok]
        if misses:
            cap, who, why = misses[0]
            checks.append(Check(f"CUDA code {module.name}", FAIL, f"no code for compute capability {_cap_text(cap)} "
                                f"({who}): {why}; it carries {listed}",
                                f"rebuild with --cuda-arch {cap} (or add \"{cap}\" to [cuda] architectures)"))
        elif cards:
            fits = "; ".join(f"{_cap_text(cap)} ({who}): {runs_on(code, cap)[1]}" for cap, who in cards)
            checks.append(Check(f"CUDA code {module.name}", PASS, f"{fits}; carries {listed}"))
        else:
            checks.append(Check(f"CUDA code {module.name}", PASS, f"carries {listed}"))
    return checks


def _listing(code: CudaCode) -> str:
    return f"SASS {', '.join(code.sass) or 'none'}; PTX {', '.join(code.ptx) or 'none'}"


def cuda_driver_check(record: CudaRuntimeRecord | None, host: NvidiaHost | None) -> Check | None:
    """The NVIDIA driver here against the floor of the CUDA runtime carried (None: nothing to compare)."""
    if record is None or host is None or not record.version:
        return None
    if not host.driver:
        return Check("NVIDIA driver", SKIP, f"not run: {host.describe()}, and its version cannot be read")
    if record.driver_min and not driver_at_least(host.driver, record.driver_min):
        return Check("NVIDIA driver", FAIL, f"driver {host.driver} is older than {record.driver_min}, the oldest "
                     f"that runs the CUDA {record.version} runtime this runtime carries ({record.source})",
                     f"update the NVIDIA driver to >= {record.driver_min}, or use a runtime built with an older "
                     "CUDA (--cuda-root)")
    if record.driver_for_ptx and not driver_at_least(host.driver, record.driver_for_ptx):
        jit = [g for g in host.gpus if g.capability is not None
               and any(needs_jit(m.code(), g.capability) for m in record.modules)]
        if jit:
            return Check("NVIDIA driver", FAIL, f"{jit[0].name} ({_cap_text(jit[0].capability or 0)}) has no SASS in the "
                         f"CUDA module, only PTX, and the driver must JIT-compile it: PTX from CUDA "
                         f"{record.version} needs driver >= {record.driver_for_ptx}, this host has {host.driver}",
                         f"update the driver to >= {record.driver_for_ptx}, or rebuild with SASS for this card "
                         f"(--cuda-arch {jit[0].capability})")
        return Check("NVIDIA driver", PASS, f"driver {host.driver} runs the CUDA {record.version} runtime "
                     f"(>= {record.driver_min}); PTX from this toolkit needs >= {record.driver_for_ptx}, so only "
                     "cards with SASS in the module are served")
    return Check("NVIDIA driver", PASS, f"driver {host.driver} >= {record.driver_for_ptx or record.driver_min}, "
                 f"what the CUDA {record.version} runtime carried needs")


def no_device_failure(backend: str, module: str, nvidia: NvidiaHost | None, amd: AmdHost | None,
                      cuda: CudaRuntimeRecord | None, rocm: RocmRecord | None) -> Check | None:
    """A module that loads and reports no device fails on a host that has such a card; None when the
    host has none (then "not run" is the truth)."""
    if backend == "cuda" and nvidia is not None:
        floor = (f"the CUDA {cuda.version} runtime carried needs driver >= {cuda.driver_min}"
                 if cuda and cuda.driver_min else "the driver floor of the CUDA runtime carried is unknown")
        return Check(f"load {module}", FAIL, f"this host has {nvidia.describe()}, but {module} reports no "
                     f"CUDA device; {floor}", "check the driver (nvidia-smi) against that floor, and that the "
                     "service user can open /dev/nvidia*; CUDA_VISIBLE_DEVICES must not hide the cards")
    if backend == "hip" and amd is not None:
        pairing = (f"ROCm {rocm.version} expects {rocm.kernel_driver}" if rocm
                   else "the ROCm release carried is unknown")
        return Check(f"load {module}", FAIL, f"this host has AMD's compute driver ({amd.evidence}; "
                     f"{amd.kernel_driver}), but {module} reports no HIP device; {pairing}",
                     "check the kernel driver against that pairing, the card's gfx target against the runtime's "
                     "(--hip-target), and that the service user is in the render/video groups")
    return None
