"""The CLI starts without loading what only some commands use: registering every command's options
imports no downloader (requests), no ELF reader (pyelftools), no probe, packager, deploy or build
machinery; each command imports its own in run(). So `assemble --help`, a refusal of bad arguments
and every quick command start in a fraction of a second (the quick suite runs the CLI ~460 times)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.common import REPO

HEAVY = ("requests", "urllib3", "elftools", "importlib.metadata", "builder.runtime.elf", "builder.runtime.manifest",
         "builder.source.fetch", "builder.check.doctor", "builder.deploy.switch", "builder.release.package",
         "builder.release.workflow", "builder.flows.build", "builder.units.plan")


def test_registering_every_command_loads_no_heavy_module():
    code = "import sys; from builder.cli.main import parser; parser(); print(*sorted(sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "builder.cli.commands.deploy" in loaded and "argparse" in loaded     # it did build the parser
    assert not loaded & set(HEAVY), f"imported while registering the commands: {sorted(loaded & set(HEAVY))}"

