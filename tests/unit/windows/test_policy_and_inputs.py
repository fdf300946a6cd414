"""The Windows pieces that need no cross-build: the DLL policy, the PE reader's refusals, telling
Windows inputs from Linux ones, and the manifest's platform field."""

from __future__ import annotations

import zipfile

import pytest

from builder.errors import AssembleError
from builder.flows.platforms.windows import is_windows_input
from builder.flows.repair import platform_of
from builder.runtime.manifest import ManifestInvalid
from builder.windows.assemble import module_backend, role
from builder.windows.pe import is_pe, read_pe
from builder.windows.policy import KINDS, _rules, host_rule
from tests.support.manifests import read_raw, write_raw
from tests.support.runtimes import tiny_runtime


@pytest.mark.parametrize("dll, kind", [
    ("KERNEL32.dll", "system"), ("api-ms-win-crt-runtime-l1-1-0.dll", "system"), ("WS2_32.dll", "system"),
    ("nvcuda.dll", "driver"), ("vulkan-1.dll", "driver"), ("amdhip64_6.dll", "driver"),
    ("VCRUNTIME140.dll", "redist"), ("msvcp140_1.dll", "redist"), ("vcomp140.dll", "redist"),
    ("cublas64_12.dll", None), ("cudart64_12.dll", None), ("ggml-base.dll", None), ("libstdc++-6.dll", None),
])
def test_the_policy_names_what_the_host_provides_with_a_reason(dll, kind):
    rule = host_rule(dll)
    assert (rule.kind if rule else None) == kind
    if rule:
        assert len(rule.reason) > 20


def test_every_rule_has_a_reason_and_a_known_kind():
    rules = _rules()
    assert rules and all(r.kind in KINDS and r.reason and r.glob == r.glob.lower() for r in rules)


def test_module_names_and_roles():
    assert module_backend("ggml-cpu-haswell.dll") == "cpu" and module_backend("GGML-CUDA.dll") == "cuda"
    assert module_backend("ggml-base.dll") is None and module_backend("ggml.dll") is None
    assert module_backend("cublas64_12.dll") is None
    assert role("libllama.dll") == "own" and role("llama-server.exe") == "own" and role("cudart64_12.dll") == "vendor"


def test_the_pe_reader_refuses_what_is_not_a_pe_file_in_one_line(tmp_path):
    text = tmp_path / "fake.dll"
    text.write_text("not a dll")
    assert not is_pe(text)
    cut = tmp_path / "cut.dll"
    cut.write_bytes(b"MZ" + b"\0" * 58 + (64).to_bytes(4, "little") + b"PE\0\0" + b"\x64\x86")   # header cut short
    assert is_pe(cut)
    with pytest.raises(AssembleError, match="not a readable PE file") as err:
        read_pe(cut)
    assert err.value.where == str(cut) and "\n" not in err.value.line()


def test_windows_inputs_are_told_from_linux_ones(tmp_path):
    win = tmp_path / "llama-b7500-bin-win-cpu-x64.zip"
    with zipfile.ZipFile(win, "w") as z:
        z.writestr("llama-server.exe", b"MZ")
        z.writestr("ggml-base.dll", b"MZ")
    linux = tmp_path / "llama-b7500-bin-ubuntu-x64.zip"
    with zipfile.ZipFile(linux, "w") as z:
        z.writestr("build/bin/libggml-base.so", b"\x7fELF")
    assert is_windows_input(str(win)) and not is_windows_input(str(linux))
    assert platform_of((str(win),)) == "windows" and platform_of((str(linux),)) == "linux"
    with pytest.raises(AssembleError, match="holds Windows binaries") as err:
        platform_of((str(win), str(linux)))
    assert "one runtime runs on one OS" in err.value.fix


def test_the_manifest_knows_its_platform_and_refuses_others(tmp_path):
    rt = tiny_runtime(tmp_path / "rt")
    raw = read_raw(rt)
    assert raw.get("platform", "linux") == "linux"
    raw["platform"] = "macos"
    write_raw(rt, raw)
    from builder.runtime.manifest import Manifest
    with pytest.raises(ManifestInvalid, match="platform"):
        Manifest.load(rt)
