"""What the manifest says a runtime needs of a host's GPU drivers, from the files it carries."""

from __future__ import annotations

import shutil

from builder.runtime.gpuruntime import describe


def test_cuda_runtime_version_from_the_carried_file_and_its_floors(tmp_path):
    g = describe(tmp_path, ["lib/libcudart.so.12.8.90", "lib/libcudart.so.12", "bin/llama-server"], {"cuda": "13.0"})
    assert g.cuda.version == "12.8"                    # the file carried wins over the toolkit built with
    assert g.cuda.driver_min.startswith("525") and g.cuda.driver_for_ptx == "570.26" and g.cuda.source
    assert g.rocm is None and g.notes == ()


def test_a_wheel_cudart_without_version_in_its_name_takes_the_toolkits(tmp_path):
    g = describe(tmp_path, ["lib/libcudart.so.13"], {"cuda": "13.0.88"})
    assert g.cuda.version == "13.0" and g.cuda.driver_min.startswith("580")


def test_rocm_release_and_kernel_driver_pairing(tmp_path):
    g = describe(tmp_path, ["lib/libamdhip64.so.6.4.43482", "lib/librocblas.so.4"], {})
    assert g.rocm.version == "6.4" and "6.4" in g.rocm.kernel_driver and g.rocm.source.startswith("http")
    assert g.cuda is None


def test_nothing_gpu_nothing_recorded(tmp_path):
    g = describe(tmp_path, ["bin/llama-server", "bin/libggml-cpu-x64.so"], {})
    assert g.cuda is None and g.rocm is None and g.notes == ()


def test_an_unknown_cuda_line_is_said_not_guessed(tmp_path):
    g = describe(tmp_path, ["lib/libcudart.so.9.2.148"], {})
    assert g.cuda.version == "9.2" and g.cuda.driver_min == "" and "no driver floor known" in g.notes[0]


def test_a_cuda_module_without_device_code_is_not_listed(tmp_path):
    (tmp_path / "bin").mkdir()
    shutil.copyfile("/bin/true", tmp_path / "bin" / "libggml-cuda.so")     # an ELF without .nv_fatbin
    g = describe(tmp_path, ["bin/libggml-cuda.so", "lib/libcudart.so.12.8.90"], {})
    assert g.cuda.modules == ()


# --- the version from the library's own code (NVIDIA's real wheels: tests/integration/runtime/) -------

from builder.runtime.cudart import runtime_version  # noqa: E402


def test_a_file_named_libcudart_that_is_not_one_falls_back_to_the_name(tmp_path):
    (tmp_path / "lib").mkdir()
    shutil.copyfile("/bin/true", tmp_path / "lib" / "libcudart.so.12.8.90")
    (tmp_path / "lib" / "libcudart.so.12").write_bytes(b"\x7fELF" + b"\0" * 60)     # truncated
    assert runtime_version(tmp_path / "lib" / "libcudart.so.12.8.90") is None
    assert runtime_version(tmp_path / "lib" / "libcudart.so.12") is None
    g = describe(tmp_path, ["lib/libcudart.so.12", "lib/libcudart.so.12.8.90"], {})
    assert g.cuda.version == "12.8"
