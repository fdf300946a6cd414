"""Shell completion is generated from the real parser, so it cannot drift from the CLI."""

from __future__ import annotations

import subprocess

from tests.support.common import assemble


def complete(script: str, words: list[str]) -> list[str]:
    cmd = (f'source /dev/stdin <<< "$SCRIPT"; COMP_WORDS=({" ".join(words)}); COMP_CWORD={len(words) - 1}; '
           '_assemble; printf "%s\\n" "${COMPREPLY[@]}"')
    out = subprocess.run(["bash", "-c", cmd], env={"SCRIPT": script, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def test_bash_completion_knows_commands_options_and_recipes():
    proc = assemble("completion", "bash")
    assert proc.returncode == 0
    assert complete(proc.stdout, ["assemble", "ver"]) == ["verify"]
    assert "--recipe" in complete(proc.stdout, ["assemble", "build", "--re"])
    assert "cuda-vulkan" in complete(proc.stdout, ["assemble", "show", "cuda-v"])
    assert "--earliest" in complete(proc.stdout, ["assemble", "pin", "--ea"])
