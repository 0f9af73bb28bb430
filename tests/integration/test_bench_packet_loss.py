"""bench.wan's loss rows on the real kernel (bench/packet_loss.py): inside the block packets on the port are
dropped and TCP resends them (every byte arrives), outside it the rules are gone. Root only: iptables."""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import pytest

from bench.packet_loss import TAG, PacketLoss, iptables

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or iptables() is None,
                                reason="iptables rules need root and iptables (scripts/setup-test.sh installs it)")


def _dropped() -> int:
    listing = subprocess.run([iptables(), "-w", "-t", "filter", "-L", "INPUT", "-n", "-v", "-x"],
                             capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[0]) for line in listing.splitlines() if TAG in line)


def _tagged_rules() -> list[str]:
    return [line for table in ("filter", "mangle") for line in subprocess.run(
        [iptables(), "-w", "-t", table, "-S"], capture_output=True, text=True, check=True).stdout.splitlines()
        if TAG in line]


def _send_through(port: int, server: socket.socket, total: int) -> int:
    got = []

    def receive():
        conn, _ = server.accept()
        with conn:
            n = 0
            while chunk := conn.recv(1 << 16):
                n += len(chunk)
            got.append(n)

    reader = threading.Thread(target=receive)
    reader.start()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        block = os.urandom(1 << 16)
        for _ in range(total // len(block)):
            client.sendall(block)
    reader.join(60)
    return got[0]


def test_packets_on_the_port_are_lost_and_resent_inside_the_block_and_the_rules_gone_after():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with PacketLoss([port], 5):
            assert len(_tagged_rules()) == 4
            received = _send_through(port, server, 8 << 20)
            dropped = _dropped()
        assert received == 8 << 20  # TCP resent what was dropped: nothing lost to the application
        assert dropped > 0
        assert _tagged_rules() == []
