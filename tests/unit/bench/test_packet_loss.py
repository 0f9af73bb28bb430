"""bench.wan's loss rows (bench/packet_loss.py): the iptables rules, their removal, and the refusals."""

from __future__ import annotations

import subprocess

import pytest

from bench import packet_loss
from bench.packet_loss import TAG, PacketLoss, refuse_unless_able, rules, tagged


def test_each_port_gets_drops_both_ways_and_a_clamp_on_both_syns():
    found = rules(40001, 1)
    assert [rule[:6] for rule in found] == [
        ["-t", "filter", "INPUT", "-p", "tcp", "--dport"], ["-t", "filter", "INPUT", "-p", "tcp", "--sport"],
        ["-t", "mangle", "OUTPUT", "-p", "tcp", "--dport"], ["-t", "mangle", "OUTPUT", "-p", "tcp", "--sport"]]
    assert all(rule[6] == "40001" and TAG in rule for rule in found)
    assert "0.0100" in found[0] and found[0][-1] == "DROP"
    assert found[2][-3:] == ["TCPMSS", "--set-mss", "1448"]


def test_only_the_tagged_rules_of_a_listing_are_deleted():
    listing = ("-P INPUT ACCEPT\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n"
               f"-A INPUT -p tcp -m tcp --dport 40001 -m comment --comment {TAG} -j DROP\n")
    assert tagged(listing) == [["INPUT", "-p", "tcp", "-m", "tcp", "--dport", "40001", "-m", "comment", "--comment",
                                TAG, "-j", "DROP"]]


class FakeIptables:
    """iptables as lists of rules per table: -A appends, -D removes, -S lists."""

    def __init__(self, left=()):
        self.tables = {"filter": list(left), "mangle": []}

    def __call__(self, argv, **_):
        args = argv[2:]  # the command and -w
        table, op, rest = args[1], args[2], args[3:]
        if op == "-S":
            return subprocess.CompletedProcess(argv, 0, "".join(f"-A {r}\n" for r in self.tables[table]), "")
        rule = " ".join(rest)
        if op == "-A":
            self.tables[table].append(rule)
        elif op == "-D":
            self.tables[table].remove(rule)
        return subprocess.CompletedProcess(argv, 0, "", "")


def test_the_rules_are_there_inside_the_block_and_gone_after_with_a_killed_runs_leftovers(monkeypatch):
    monkeypatch.setattr(packet_loss, "iptables", lambda: "iptables")
    left = f"INPUT -p tcp --dport 39999 -m comment --comment {TAG} -j DROP"
    fake = FakeIptables(left=[left, "INPUT -p tcp --dport 22 -j ACCEPT"])
    with PacketLoss([40001, 40002], 1, run=fake):
        assert left not in fake.tables["filter"]
        assert len(fake.tables["filter"]) == 5 and len(fake.tables["mangle"]) == 4
    assert fake.tables == {"filter": ["INPUT -p tcp --dport 22 -j ACCEPT"], "mangle": []}


def test_a_failed_run_inside_the_block_still_removes_the_rules(monkeypatch):
    monkeypatch.setattr(packet_loss, "iptables", lambda: "iptables")
    fake = FakeIptables()
    with pytest.raises(RuntimeError), PacketLoss([40001], 1, run=fake):
        raise RuntimeError("the mirror failed")
    assert fake.tables == {"filter": [], "mangle": []}


def test_no_loss_asked_needs_nothing():
    refuse_unless_able(0)


def test_a_loss_without_root_or_iptables_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(packet_loss.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit, match=r"--loss-pct needs root .*pass --loss-pct 0"):
        refuse_unless_able(1)
    monkeypatch.setattr(packet_loss.os, "geteuid", lambda: 0)
    monkeypatch.setattr(packet_loss, "iptables", lambda: None)
    with pytest.raises(SystemExit, match=r"--loss-pct needs iptables \(apt-get install iptables"):
        refuse_unless_able(1)
    with pytest.raises(SystemExit, match="under 100"):
        refuse_unless_able(100)
