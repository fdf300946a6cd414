"""Who holds a port, read from /proc: a real socket held by a real child process is named (pid and
command line), the wait gives up after its bound naming it, and returns as soon as the port is free."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from builder.check.dynamic import free_port
from builder.deploy.ports import port_holder, wait_port_free
from builder.errors import AssembleError

HOLD = ("import socket, sys, time; s = socket.socket({family}); s.bind(({host!r}, int(sys.argv[1]))); s.listen(); "
        "print('listening', flush=True); time.sleep(600)")


def hold(port: int, family: str = "socket.AF_INET", host: str = "127.0.0.1") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD.format(family=family, host=host), str(port), "port-holder-test"],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "listening"
    return p


@pytest.mark.parametrize("family, host", [("socket.AF_INET", "127.0.0.1"), ("socket.AF_INET6", "::1")])
def test_the_holder_is_named(family, host):
    port = free_port()
    assert port_holder(port) is None
    child = hold(port, family, host)
    try:
        holder = port_holder(port)
        assert holder is not None and holder.pid == child.pid
        assert holder.comm.startswith("python") and "port-holder-test" in holder.cmdline
        assert f"pid {child.pid}" in holder.describe()
    finally:
        child.kill()
        child.wait()
    assert port_holder(port) is None


def test_a_connected_client_is_not_a_holder():
    """Only a listening socket holds a port: a client connected to it does not."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        server.close()
        try:
            assert port_holder(port) is None
        finally:
            conn.close()
            client.close()


def test_the_wait_times_out_naming_the_holder():
    port = free_port()
    child = hold(port)
    try:
        start = time.monotonic()
        with pytest.raises(AssembleError) as e:
            wait_port_free(port, 1.0)
        assert 1.0 <= time.monotonic() - start < 5
        assert e.value.code == 1 and f"pid {child.pid}" in e.value.what and "port-holder-test" in e.value.what
        wait_port_free(port, 0, allowed_pid=child.pid)        # the unit's own server may hold it
    finally:
        child.kill()
        child.wait()


def test_the_wait_returns_once_the_port_is_released():
    port = free_port()
    child = hold(port)
    subprocess.Popen(["bash", "-c", f"sleep 1; kill {child.pid}"])
    start = time.monotonic()
    wait_port_free(port, 30)
    assert time.monotonic() - start < 10
    child.wait()
