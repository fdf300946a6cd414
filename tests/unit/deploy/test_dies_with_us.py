"""proc.dies_with_us: a child started with it dies when its parent is SIGKILLed (the deploy's preflight
server must never outlive a killed deploy); without it the child lives on (the test can fail)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.common import REPO

PARENT = '''
import subprocess, sys, time
from builder.proc import dies_with_us
kw = {"preexec_fn": dies_with_us()} if sys.argv[1] == "yes" else {}
c = subprocess.Popen(["sleep", "120"], **kw)
print(c.pid, flush=True)
time.sleep(120)
'''


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("guarded", [True, False])
def test_child_dies_with_its_sigkilled_parent(guarded):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "yes" if guarded else "no"], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait(10)
    try:
        deadline = time.monotonic() + 5
        while alive(child) and guarded and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive(child) is not guarded
    finally:
        if alive(child):
            os.kill(child, 9)
