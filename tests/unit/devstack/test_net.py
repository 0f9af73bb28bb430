"""devstack's port picking: never a port handed out before, by this process or another, nor one in the kernel's
ephemeral range (an outgoing connection may take such a port before the server binds it)."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

import pytest

from devstack import net


def _isolated(monkeypatch, tmp_path, candidates):
    monkeypatch.setattr(net, "_handed_out", {})
    monkeypatch.setattr(net, "_LOCKS", tmp_path)
    monkeypatch.setattr(net, "_candidates", lambda: candidates)


def test_ports_come_from_below_the_ephemeral_range():
    low = net._ephemeral_low()
    ports = [net.free_port() for _ in range(50)]
    if low is not None:
        assert all(port < low for port in ports), (low, ports)
    assert len(set(ports)) == len(ports)


def test_the_range_stops_below_the_kernels_low_end(monkeypatch):
    monkeypatch.setattr(net, "_ephemeral_low", lambda: 32768)
    assert net._candidates() == range(20768, 32768)
    monkeypatch.setattr(net, "_ephemeral_low", lambda: 2048)  # no room below: the kernel picks
    assert net._candidates() is None


def test_a_port_reserved_by_another_process_is_not_handed_out(monkeypatch, tmp_path):
    with socket.socket() as probe:  # a port free now
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
    _isolated(monkeypatch, tmp_path, range(first, first + 1))
    fd = os.open(tmp_path / str(first), os.O_CREAT | os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what another process's free_port leaves
    try:
        monkeypatch.setattr(net._random, "choice", lambda _c: first)
        with pytest.raises(RuntimeError, match="no free loopback port"):
            net.free_port()
    finally:
        os.close(fd)
    assert net.free_port() == first  # its lock released: free again


def test_a_port_something_listens_on_is_skipped(monkeypatch, tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        _isolated(monkeypatch, tmp_path, range(taken, taken + 1))
        with socket.socket() as spare:
            spare.bind(("127.0.0.1", 0))
            free = spare.getsockname()[1]
        offered = iter([taken, taken, free])
        monkeypatch.setattr(net._random, "choice", lambda _c: next(offered))
        assert net.free_port() == free


def test_free_ports_are_distinct_even_when_the_kernel_repeats_one(monkeypatch, tmp_path):
    # Without a range below the ephemeral one the kernel picks, and may give a closed port again: both brokers of
    # one test session once got 57051.
    _isolated(monkeypatch, tmp_path, None)
    ports = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    offered = iter([ports[0], ports[0], ports[1], ports[0], ports[2]])
    monkeypatch.setattr(net, "_kernel_port", lambda: next(offered))
    assert [net.free_port(), net.free_port(), net.free_port()] == ports


def test_real_free_ports_are_distinct():
    ports = [net.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_each_user_reserves_ports_in_a_folder_of_its_own():
    """A lock folder another user made (root's test runs: mode 0755, files 0644) refuses this user's lock files:
    `make run` as a second user failed with PermissionError on /tmp/devstack-ports/<port>."""
    assert net.locks_folder(0) != net.locks_folder(1001)
    assert net.locks_folder(1001).parent == Path(tempfile.gettempdir())
    assert net._LOCKS == net.locks_folder(os.getuid())
