"""devstack's port picking: a port handed out once is never handed out again by the same process."""

from __future__ import annotations

import socket

from devstack import net


def test_free_ports_are_distinct_even_when_the_kernel_repeats_one(monkeypatch):
    # The kernel may give a closed ephemeral port again: both brokers of one test session once got 57051.
    offered = iter([50001, 50001, 50002, 50001, 50003])

    class Socket:
        def __init__(self, *_args):
            self.port = None

        def __enter__(self):
            return self

        def __exit__(self, *_exc):
            return False

        def bind(self, _address):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(net, "_handed_out", set())
    monkeypatch.setattr(socket, "socket", Socket)
    assert [net.free_port(), net.free_port(), net.free_port()] == [50001, 50002, 50003]


def test_real_free_ports_are_distinct():
    ports = [net.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
