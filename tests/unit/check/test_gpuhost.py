"""A host with an NVIDIA or AMD card whose module reports no device fails verify, naming the driver
and the floor; "not run" stays for hosts without such a card. The NVIDIA side is driven through a
stand-in nvidia-smi (a script answering like the real one), the way a host with an old driver looks."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from builder.check import gpufit
from builder.toolchain import gpus as gpu_probes
from builder.check.report import FAIL, PASS
from builder.runtime.gpuruntime import CudaModuleCode, CudaRuntimeRecord, RocmRecord

CUDA128 = CudaRuntimeRecord("12.8", "525.60.13", "570.26", "NVIDIA CUDA Toolkit Release Notes")


def _smi(tmp_path: Path, body: str) -> str:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n{body}\n")
    os.chmod(smi, 0o755)
    return str(smi)


def test_stand_in_nvidia_smi_is_read(tmp_path):
    smi = _smi(tmp_path, 'echo "NVIDIA H200, 570.86.15, 9.0"; echo "NVIDIA GeForce RTX 4090, 570.86.15, 8.9"')
    host = gpu_probes.nvidia_host(smi)
    assert host.driver == "570.86.15" and [g.capability for g in host.gpus] == [90, 89]
    assert "2 NVIDIA GPU(s)" in host.describe() and "570.86.15" in host.describe()


def test_old_driver_fails_with_driver_and_floor(tmp_path):
    host = gpu_probes.nvidia_host(_smi(tmp_path, 'echo "Tesla T4, 470.256.02, 7.5"'))
    check = gpufit.cuda_driver_check(CUDA128, host)
    assert check.status == FAIL and "470.256.02" in check.reason and "525.60.13" in check.reason
    assert "12.8" in check.reason and ">= 525.60.13" in check.hint
    missing = gpufit.no_device_failure("cuda", "libggml-cuda.so", host, None, CUDA128, None)
    assert missing.status == FAIL and "470.256.02" in missing.reason and "525.60.13" in missing.reason


def test_new_enough_driver_passes_and_says_what_ptx_needs(tmp_path):
    host = gpu_probes.nvidia_host(_smi(tmp_path, 'echo "NVIDIA A100, 535.54.03, 8.0"'))
    check = gpufit.cuda_driver_check(CUDA128, host)
    assert check.status == PASS and "570.26" in check.reason     # PTX from 12.8 needs the 12.8 driver
    host = gpu_probes.nvidia_host(_smi(tmp_path, 'echo "NVIDIA H200, 580.65.06, 9.0"'))
    assert gpufit.cuda_driver_check(CUDA128, host).status == PASS


def test_a_card_served_only_by_ptx_needs_the_toolkits_own_driver(tmp_path):
    record = dataclasses.replace(CUDA128, modules=(CudaModuleCode("bin/libggml-cuda.so", ("sm_80", "sm_90"),
                                                                  ("compute_75",)),))
    t4 = gpu_probes.nvidia_host(_smi(tmp_path, 'echo "Tesla T4, 535.54.03, 7.5"'))        # PTX only: JIT
    check = gpufit.cuda_driver_check(record, t4)
    assert check.status == FAIL and "Tesla T4 (7.5)" in check.reason and "570.26" in check.reason
    a100 = gpu_probes.nvidia_host(_smi(tmp_path, 'echo "NVIDIA A100, 535.54.03, 8.0"'))   # SASS: minor-version compat
    assert gpufit.cuda_driver_check(record, a100).status == PASS


def test_a_host_without_cards_is_not_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_probes, "_PROC_VERSION", tmp_path / "absent")
    monkeypatch.setattr(gpu_probes, "_KFD", tmp_path / "kfd")
    failing = _smi(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2; exit 9")
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        assert gpu_probes.nvidia_host(failing) is None
    assert gpu_probes.amd_host() is None
    assert gpufit.no_device_failure("cuda", "libggml-cuda.so", None, None, CUDA128, None) is None
    assert gpufit.cuda_driver_check(CUDA128, None) is None


def test_amd_host_with_no_hip_device_fails(tmp_path, monkeypatch):
    kfd = tmp_path / "kfd"
    kfd.write_text("")
    monkeypatch.setattr(gpu_probes, "_KFD", kfd)
    amd = gpu_probes.amd_host()
    rocm = RocmRecord("6.4", "amdgpu from ROCm 6.2-6.4", "AMD compatibility matrix")
    check = gpufit.no_device_failure("hip", "libggml-hip.so", None, amd, None, rocm)
    assert check.status == FAIL and "ROCm 6.4" in check.reason and "/dev/kfd" in check.reason


@pytest.mark.parametrize("line", ["", "garbage", "NVIDIA X, not-a-version, 8.9"])
def test_unreadable_smi_output_is_no_card_list(tmp_path, monkeypatch, line):
    monkeypatch.setattr(gpu_probes, "_PROC_VERSION", tmp_path / "absent")
    host = gpu_probes.nvidia_host(_smi(tmp_path, f'echo "{line}"'))
    assert host is None or host.gpus == ()


def test_card_memory_from_nvidia_smi_and_amdgpu_sysfs(tmp_path):
    """What the placement check reports beside the log: each card's memory, named by PCI address in ggml's
    spelling (nvidia-smi's 8-digit domain made 4), from a stand-in nvidia-smi and a sysfs tree like amdgpu's."""
    smi = _smi(tmp_path, 'echo "00000000:00:06.0, 143771 MiB, 2913 MiB"; echo "garbage"')
    dev = tmp_path / "sys" / "0000:C3:00.0"
    dev.mkdir(parents=True)
    (dev / "mem_info_vram_total").write_text(str(48 << 30) + "\n")
    (dev / "mem_info_vram_used").write_text(str(1536 << 20) + "\n")
    (tmp_path / "sys" / "0000:00:1f.0").mkdir()            # a PCI device without VRAM counters
    cards = gpu_probes.card_memory(smi, str(tmp_path / "sys"))
    assert cards == (gpu_probes.CardMemory("0000:00:06.0", 143771, 2913, "nvidia-smi"),
                     gpu_probes.CardMemory("0000:c3:00.0", 49152, 1536, "sysfs"))
    assert gpu_probes.pci_id("00000000:C1:00.0") == "0000:c1:00.0" == gpu_probes.pci_id("0000:c1:00.0")
