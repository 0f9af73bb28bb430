"""Consumer-group admin calls through links that drop (mirror_worker/clients/coordinator_admin.py).

librdkafka 2.16 aborts the process when a DescribeConsumerGroups request meets a dropped connection
(librdkafka issue 4605): the CI run of the two-minute source outage lost its worker to SIGABRT from the
catch-up check's describe 30 s after the link came back. A plain AdminClient looping the same describes
through this test's cuts aborted within six cycles when tried (`python -m tests.coordinator_loop --raw`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from devstack.toxics import proxies
from mirror_worker.clients import factory
from tests.integration.test_broker_faults import clusters  # noqa: F401  (fixture)
from tests.kafka_util import create_topic

pytestmark = [pytest.mark.integration, pytest.mark.faults]

CYCLES = 8
OUT_S, IN_S = 6.0, 3.0
RAW: list[str] = []  # ["--raw"]: a plain AdminClient, as before the fix (it aborts)


def test_group_describes_survive_dropped_links(clusters, tmp_path, topic_name):
    """A loop of describes of a group with one member, through the worker's admin client, while every source
    proxy is black-holed, reset or cut for 6 s in 8 cycles: the loop's process never dies, and once the
    link is back it answers the group as it is (Stable, one member)."""
    src = clusters["source"]
    topic = topic_name("coord-calls")
    create_topic(src.bootstrap_servers, topic, 1, replication_factor=3)
    group = f"{topic}.catchup"
    member = factory.side_consumer({"bootstrap.servers": src.direct_bootstrap_servers}, group,
                                   {"session.timeout.ms": 120_000})  # past the proxies: stays a member
    member.subscribe([topic])
    stop = threading.Event()

    def keep_membership() -> None:
        while not stop.is_set():
            member.poll(0.5)

    polling = threading.Thread(target=keep_membership, daemon=True)
    polling.start()
    log = (tmp_path / "loop.out").open("w")
    loop = subprocess.Popen([sys.executable, "-m", "tests.coordinator_loop", src.bootstrap_servers, group, *RAW],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(IN_S)
        for cycle in range(CYCLES):
            for proxy in proxies(src):
                (proxy.black_hole, proxy.reset_peer, proxy.cut)[cycle % 3]()
            time.sleep(OUT_S)
            for proxy in proxies(src):
                proxy.restore()
            time.sleep(IN_S)
            assert loop.poll() is None, f"the describe loop died (status {loop.returncode}) in cycle {cycle}: " \
                                        f"{(tmp_path / 'loop.out').read_text()[-1500:]}"
        after_restore = len(_answers(tmp_path / "loop.out"))
        deadline = time.monotonic() + 60
        while {"state": "STABLE", "members": 1} not in _answers(tmp_path / "loop.out")[after_restore:]:
            assert time.monotonic() < deadline, _answers(tmp_path / "loop.out")[-5:]
            assert loop.poll() is None, f"the describe loop died (status {loop.returncode}) after the cuts"
            time.sleep(1)
    finally:
        loop.kill()
        stop.set()
        polling.join(5)
        member.close()
        log.close()


def _answers(path) -> list[dict]:
    """The loop's answers so far (its stdout also carries the log lines of the worker's admin client)."""
    answers = [json.loads(line) for line in path.read_text().splitlines() if '"took_s"' in line]
    return [{"state": a["state"], "members": a["members"]} if "state" in a else a for a in answers]
