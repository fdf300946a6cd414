"""--secret api-key=FILE: the key reaches the server as systemd's credential and nothing deploy writes holds
it (env file, serve script, release.json, unit, --dry-run's output), only the file's path; a key file other
users can read, a missing one, an unknown NAME and a key given through --env are refused in one line. The
booted systemd serves with it, answers 401 without it, and the gate authenticates with it
(tests/integration/test_deploy_systemd.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builder.check.tinymodel import write_tiny_llama
from builder.deploy.credentials import credential_path, parse_secrets
from builder.errors import AssembleError
from tests.support.common import assemble, one_error_line
from tests.support.runtimes import make_runtime

KEY = "sk-test-0123456789abcdef"


def key_file(folder: Path, mode: int = 0o600, text: str = f"# the chat key\n{KEY}\n") -> Path:
    path = folder / "chat.key"
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("case, words", [
    ("other=FILE", "NAME of api-key"), ("api-key", "NAME=FILE"), ("api-key=MISSING", "cannot be read"),
    ("api-key=WORLD", "readable by other users (mode 644)"), ("api-key=EMPTY", "holds no key"),
    ("api-key=DIR", "not a regular file"),
])
def test_bad_secrets_are_refused(case, words, tmp_path):
    for sub in ("w", "e"):
        (tmp_path / sub).mkdir()
    paths = {"FILE": key_file(tmp_path), "MISSING": tmp_path / "none", "DIR": tmp_path,
             "WORLD": key_file(tmp_path / "w", 0o644), "EMPTY": key_file(tmp_path / "e", 0o600, "# none\n")}
    for k, v in paths.items():
        case = case.replace(k, str(v))
    with pytest.raises(AssembleError) as e:
        parse_secrets([case])
    assert words in e.value.line() and e.value.code == 2


def test_nothing_deploy_writes_holds_the_key(tmp_path):
    root = tmp_path / "img"
    (root / "etc").mkdir(parents=True)
    (root / "srv").mkdir()
    model = write_tiny_llama(root / "srv" / "tiny.gguf")
    key = key_file(root / "srv")
    rt = make_runtime(tmp_path / "rt")
    args = ("deploy", str(rt), "--name", "chat", "--model", str(model), "--secret", f"api-key={key}", "--root", str(root))
    dry = assemble(*args, "--dry-run")
    assert dry.returncode == 0 and KEY not in dry.stdout + dry.stderr
    assert "LoadCredential=api-key:/srv/chat.key" in dry.stdout
    assert f"LLAMA_ARG_API_KEY_FILE='{credential_path('assemble-chat.service', 'api-key')}'" in dry.stdout
    proc = assemble(*args)
    assert proc.returncode == 0, proc.stderr
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            if path != key and not path.is_symlink():
                assert KEY.encode() not in path.read_bytes(), path
    rid = proc.stdout.strip()
    record = json.loads((root / "opt/assemble/chat/releases" / rid / "release.json").read_text())
    assert record["secrets"] == {"api-key": "/srv/chat.key"}
    # another key file is another release (the env file's comment names it)
    other = root / "srv" / "other.key"
    other.write_text(KEY + "\n")
    other.chmod(0o600)
    again = assemble(*args[:-4], "--secret", f"api-key={other}", "--root", str(root))
    assert again.returncode == 0 and again.stdout.strip() != rid


@pytest.mark.parametrize("key", ["LLAMA_API_KEY", "LLAMA_ARG_API_KEY", "LLAMA_ARG_API_KEY_FILE"])
def test_a_key_through_env_is_refused(key, tmp_path):
    (tmp_path / "etc").mkdir()
    proc = assemble("deploy", "rt", "--name", "chat", "--model", "m", "--env", f"{key}=x", "--root", str(tmp_path))
    one_error_line(proc, 2, [f"--env {key} is refused", "--secret api-key=FILE"])


def test_the_credential_line_parses(tmp_path):
    """LoadCredential=ID:PATH takes PATH as the rest of the line, specifiers expanded: `%` doubled, a space as is;
    the host's systemd-analyze verify (252) parses it without a word."""
    import shutil
    import subprocess

    from builder.deploy.unit import UnitSpec, render_unit, service_user

    assert shutil.which("systemd-analyze"), "systemd-analyze missing: the systemd package has it"
    spec = UnitSpec("chat", service_user("chat"), Path("/opt/assemble/chat"), ("cpu",), Path("/srv/m.gguf"),
                    credentials=(("api-key", "/etc/my keys/%n.key"),))
    text = render_unit(spec)
    assert "LoadCredential=api-key:/etc/my keys/%%n.key" in text.splitlines()
    unit = tmp_path / "assemble-chat.service"
    unit.write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                          timeout=60)
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "is not executable" not in line]
    assert said == [], said
