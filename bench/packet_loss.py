"""Packet loss on the mirror's connections to one cluster, for bench.wan's loss rows.

Toxiproxy works above TCP (it delays bytes, it cannot lose a packet), and this kernel has no `netem`, so the loss
is iptables' `statistic` match: each packet to or from the cluster's proxy port is dropped with probability P, and
TCP retransmits it. Two things make loopback behave more like a WAN link:
- the connections' MSS is clamped to 1,448 B (an Ethernet path), so TCP counts its window in WAN-sized segments;
  without it a dropped loopback packet is one of a few 64-KiB segments and 1 % loss cost nothing measurable;
- the round trip TCP itself sees is still loopback's (the WAN latency is inside the proxy), so it recovers in
  microseconds where a real path takes a round trip: the row shows the cost of losing and resending, not the
  smaller congestion window a lossy WAN's round trip would also bring.

Every rule carries the comment TAG and is removed on exit, also those a killed earlier run left.
"""

from __future__ import annotations

import os
import shutil
import subprocess

TAG = "bench-wan-loss"
WAN_MSS = 1448


def iptables() -> str | None:
    """The iptables command; the legacy one first (this kernel has ip_tables, maybe not nf_tables)."""
    return shutil.which("iptables-legacy") or shutil.which("iptables")


def refuse_unless_able(loss_pct: float) -> None:
    """One line and a non-zero exit before any broker starts when loss rows were asked for and cannot be made."""
    if loss_pct <= 0:
        return
    if loss_pct >= 100:
        raise SystemExit(f"bench.wan: --loss-pct must be under 100, got {loss_pct}")
    if os.geteuid() != 0:
        raise SystemExit("bench.wan: --loss-pct needs root (iptables rules on loopback); pass --loss-pct 0 to run "
                         "without the loss row")
    if iptables() is None:
        raise SystemExit("bench.wan: --loss-pct needs iptables (apt-get install iptables; make bench-wan installs it "
                         "as root); pass --loss-pct 0 to run without the loss row")


def rules(port: int, loss_pct: float) -> list[list[str]]:
    """(table, chain, match...) of every rule for `port`: drops both ways, the MSS clamp on both SYNs."""
    drop = ["-m", "statistic", "--mode", "random", "--probability", f"{loss_pct / 100:.4f}",
            "-m", "comment", "--comment", TAG, "-j", "DROP"]
    clamp = ["--tcp-flags", "SYN,RST", "SYN", "-m", "comment", "--comment", TAG,
             "-j", "TCPMSS", "--set-mss", str(WAN_MSS)]
    return [
        ["-t", "filter", "INPUT", "-p", "tcp", "--dport", str(port), *drop],
        ["-t", "filter", "INPUT", "-p", "tcp", "--sport", str(port), *drop],
        ["-t", "mangle", "OUTPUT", "-p", "tcp", "--dport", str(port), *clamp],
        ["-t", "mangle", "OUTPUT", "-p", "tcp", "--sport", str(port), *clamp],
    ]


def tagged(listing: str) -> list[list[str]]:
    """The delete commands' arguments for the TAG rules in one table's `iptables -S` listing."""
    return [line.split()[1:] for line in listing.splitlines() if line.startswith("-A ") and TAG in line]


class PacketLoss:
    """`with PacketLoss(ports, pct):` loses pct % of the packets on each port's connections (new connections get
    the MSS clamp: start the mirror inside the block)."""

    def __init__(self, ports: list[int], loss_pct: float, run=subprocess.run) -> None:
        self.ports, self.loss_pct, self._run = ports, loss_pct, run

    def _iptables(self, *args: str) -> str:
        done = self._run([iptables(), "-w", *args], capture_output=True, text=True, check=True)
        return done.stdout

    def clear(self) -> None:
        for table in ("filter", "mangle"):
            for rule in tagged(self._iptables("-t", table, "-S")):
                self._iptables("-t", table, "-D", *rule)

    def __enter__(self) -> PacketLoss:
        self.clear()
        for port in self.ports:
            for table_flag, table, chain, *match in rules(port, self.loss_pct):
                self._iptables(table_flag, table, "-A", chain, *match)
        return self

    def __exit__(self, *exc) -> None:
        self.clear()
