"""Paths written into the unit by systemd's rules: the host's own `systemd-analyze verify` (systemd 252)
parses every rendered unit without a word, while the same paths written as they are make it complain
(the oracle sees the fault). What systemd reads back from each escaped value, `systemctl show` in the
booted guest checks (tests/integration/test_deploy_systemd.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.deploy.unit import UnitSpec, render_unit, service_user
from builder.deploy.unitquote import UnitValueError, exec_path, path_item, verbatim

# (model path, whether verify complains when it is written as it is): a space or a `:` splits the path, a
# quote opens one; a `%` or a backslash is silently read as something else (the guest test reads it back).
ODD = [("/home/op/my models/m.gguf", True), ("/home/op/a:b/m.gguf", True), ('/home/op/say "hi"/m.gguf', True),
       ("/home/op/modèle ünïcode/m.gguf", True), ("/home/op/50%n/m.gguf", False), ("/home/op/it's/m.gguf", True),
       ("/home/op/back\\slash/m.gguf", False), ("/tmp/x $HOME/m.gguf", True)]


def test_escapes():
    assert path_item("/srv/models/m-1.gguf") == "/srv/models/m-1.gguf"          # plain: written as it is
    assert path_item("/home/op/my models/50%n: x\\y\"q's modèle.gguf") == \
        '"/home/op/my models/50%%n\\: x\\\\y\\"q\'s modèle.gguf"'    # read back by systemd 252 as the path itself
    assert exec_path("/opt/x y/se%n$rve") == '"/opt/x y/se%%n$$rve"'
    assert verbatim("/opt/x y/%n/env") == "/opt/x y/%%n/env"


@pytest.mark.parametrize("bad", ["/a\nb", "/a\x7fb", "/a\udcffb"])
def test_what_no_escape_carries_is_refused(bad):
    for f in (path_item, exec_path, verbatim):
        with pytest.raises(UnitValueError):
            f(bad)
    with pytest.raises(UnitValueError):
        verbatim(" /lead")
    with pytest.raises(UnitValueError):
        exec_path("-/opt/x")


def verify(text: str, tmp_path: Path) -> str:
    assert shutil.which("systemd-analyze"), "systemd-analyze missing: the systemd package has it"
    unit = tmp_path / "assemble-chat.service"
    unit.write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          timeout=60)
    # ExecStart's program does not exist on this host: the one complaint that is not about parsing
    return "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                     if "is not executable" not in line and "Command /" not in line)


@pytest.mark.parametrize("model, seen", ODD)
def test_systemd_parses_every_odd_model_path(model, seen, tmp_path):
    spec = UnitSpec("chat", service_user("chat"), Path("/opt/assemble/chat"), ("cpu",), Path(model))
    text = render_unit(spec)
    assert "BindReadOnlyPaths=" in text
    assert verify(text, tmp_path) == ""
    naive = "\n".join(f"BindReadOnlyPaths={model}" if line.startswith("BindReadOnlyPaths=") else line
                      for line in text.splitlines())
    assert bool(verify(naive, tmp_path)) == seen
