"""Every repair platform answers the same four calls (builder.flows.platforms.RepairPlatform), and
the CLI's choice of platform is the inputs' own: a Windows zip gets the Windows module, a build
folder the Linux one, a mix is refused before anything is unpacked."""

from __future__ import annotations

import inspect
import zipfile

import pytest

from builder.errors import AssembleError
from builder.flows import repair
from builder.flows.platforms import RepairPlatform, linux, windows

CALLS = ("plan", "show", "place", "verify")


@pytest.mark.parametrize("name", sorted(repair.PLATFORMS))
def test_each_platform_has_the_protocols_calls(name):
    module = repair.PLATFORMS[name]
    for call in CALLS:
        wanted = [p for p in inspect.signature(getattr(RepairPlatform, call)).parameters if p != "self"]
        given = list(inspect.signature(getattr(module, call)).parameters)
        assert len(given) == len(wanted), f"{name}.{call}{given}: the protocol has {wanted}"


def test_the_inputs_choose_the_platform(tmp_path):
    win = tmp_path / "llama-b1-bin-win-cpu-x64.zip"
    with zipfile.ZipFile(win, "w") as zf:
        zf.writestr("llama-server.exe", b"MZ")
        zf.writestr("ggml-base.dll", b"MZ")
    folder = tmp_path / "build" / "bin"
    folder.mkdir(parents=True)
    (folder / "libggml-base.so").write_bytes(b"\x7fELF")
    assert repair.PLATFORMS[repair.platform_of((str(win),))] is windows
    assert repair.PLATFORMS[repair.platform_of((str(tmp_path / "build"),))] is linux
    with pytest.raises(AssembleError, match="holds Windows binaries"):
        repair.platform_of((str(win), str(tmp_path / "build")))
