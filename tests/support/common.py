"""What most tests need: where the checkout is, the pinned sha, the shared test cache, and the
real CLI run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHA = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
# A small valid recipe (cuda + vulkan, one git mirror that is never reached) that tests edit one key of
GOOD_RECIPE = f'''
name = "t"
description = "test"
backends = ["cuda", "vulkan"]
[pin]
sha = "{SHA}"
[[pin.mirrors]]
kind = "git"
url = "https://example.invalid/llama.cpp.git"
[cuda]
architectures = ["90"]
'''
TEST_CACHE = Path(os.environ.get("ASSEMBLE_TEST_CACHE", Path.home() / ".cache" / "assemble-tests"))


def assemble(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = False,
             timeout: float = 3600, python: Path | str | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would (from another environment's `python`)."""
    full_env = dict(os.environ)
    full_env.setdefault("ASSEMBLE_CACHE", str(TEST_CACHE / "cache"))
    full_env.update(env or {})
    proc = subprocess.run([str(python or sys.executable), "-m", "builder", *args], cwd=cwd or REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"assemble {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def one_error_line(proc: subprocess.CompletedProcess, code: int, words: list[str] | tuple[str, ...] = ()) -> str:
    """The promise of every refusal: this exit code, one `error:` line naming `words`, no traceback."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and "internal error" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]
