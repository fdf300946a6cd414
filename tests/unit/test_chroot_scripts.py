"""The chroot and fetch scripts' refusals, one line each (quick tier: nothing is bootstrapped or fetched)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from tests.support.common import REPO, SHA, assemble

SCRIPTS = REPO / "scripts"


def test_rocm_validate_refuses_an_unknown_stage_in_one_line(tmp_path):
    work = tmp_path / "work"
    proc = subprocess.run([str(SCRIPTS / "rocm-validate.sh"), "fetch", "biuld"], env=dict(os.environ, WORK=str(work)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "unknown stage 'biuld'" in proc.stderr and "fix:" in proc.stderr
    assert not work.exists()   # refused before any stage ran


def test_the_chroot_scripts_refuse_a_user_who_is_not_root_in_one_line(tmp_path):
    """Run as nobody (root in CI drops to uid 65534 with setpriv) from a copy every user can read."""
    folder = Path(tempfile.mkdtemp())
    try:
        shutil.copytree(SCRIPTS, folder / "scripts")
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        work = folder / "work"
        for script, args in (("rocm-validate.sh", ["chroot", "fetch"]), ("assemble-in-chroot.sh", ["--", "list"])):
            proc = subprocess.run([*drop, str(folder / "scripts" / script), *args], cwd=folder, capture_output=True,
                                  text=True, timeout=60, env=dict(os.environ, WORK=str(work)))
            assert proc.returncode == 2 and proc.stdout == "", (script, proc.stderr)
            assert proc.stderr.count("\n") == 1 and "needs root" in proc.stderr and "fix:" in proc.stderr, proc.stderr
        assert not work.exists()
    finally:
        shutil.rmtree(folder)


def test_fetch_failures_are_one_line(isolated_cache, tmp_path):
    proc = assemble("fetch", "no-such-recipe")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "unknown recipe" in proc.stderr, proc.stderr
    recipe = tmp_path / "offline.toml"
    recipe.write_text((REPO / "recipes" / "cpu.toml").read_text().split("[[pin.mirrors]]")[0]
                      + f'[[pin.mirrors]]\nkind = "local"\npath = "{tmp_path / "nothing-here"}"\n')
    proc = assemble("fetch", str(recipe))
    assert proc.returncode == 1, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "no mirror could provide llama.cpp" in error[0] and "fix:" in error[0], proc.stderr
    assert not (isolated_cache / "sources" / SHA).exists()
