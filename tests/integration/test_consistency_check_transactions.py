"""The consistency check over a transactional source the worker mirrored (one topic with provenance headers,
one without, one exactly-once): aborted records and transaction markers are not missing, and a partition
whose transaction is still open is checked up to its last stable offset and named in the report."""

from __future__ import annotations

import pytest

from tests.integration.test_consistency_check import run_check, zero_counts
from tests.transactional_source import OPEN_PARTITIONS, PARTITIONS, TransactionalSource, write_transactional_source
from tests.worker_util import WorkerProcess, wait_for_count, write_properties

pytestmark = [pytest.mark.integration, pytest.mark.spark]

LAST_STABLE = {0: 22, 2: 19}     # see write_transactional_source
HIGH = {0: 27, 2: 24}


def _mirror(stack, tmp_path, source: TransactionalSource, *flags: str) -> None:
    """The worker mirrors the source topic to `tx.<topic>` until every committed record is there, then stops."""
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = source.topic
    consumer = write_properties(tmp_path / f"{topic}.source.properties", {"bootstrap.servers": src, "group.id": f"g-{topic}"})
    producer = write_properties(tmp_path / f"{topic}.destination.properties", {"bootstrap.servers": dst})
    worker = WorkerProcess(["--consumer.config", consumer, "--producer.config", producer, "--whitelist", topic,
                            "--prefix", "tx.", "--preserve.partitions", *flags], tmp_path, topic)
    try:
        committed = sum(len(v) for v in source.committed.values())
        assert len(wait_for_count(dst, f"tx.{topic}", committed, timeout=90)) == committed
    finally:
        assert worker.terminate() == 0, worker.stderr[-2000:]


def test_a_mirrored_transactional_source_is_consistent_up_to_the_last_stable_offset(stack, topic_name, tmp_path):
    src = stack["source"].kafka.bootstrap_servers
    sources = [write_transactional_source(src, topic_name("cc-tx-prov")),
               write_transactional_source(src, topic_name("cc-tx-plain")),
               write_transactional_source(src, topic_name("cc-tx-eos"))]
    try:
        _mirror(stack, tmp_path, sources[0], "--provenance.headers")
        _mirror(stack, tmp_path, sources[1])
        # Exactly-once: the destination holds transactions of its own, read read_committed.
        _mirror(stack, tmp_path, sources[2], "--exactly.once", "--provenance.headers")

        run = run_check(stack, tmp_path, "--topics", ",".join(s.topic for s in sources), "--prefix", "tx.")
    finally:
        for source in sources:
            source.open_producer.abort_transaction(30)

    assert run.rc == 0, run.stderr[-3000:]
    assert run.report["status"] == "ok"
    checked = sum(len(v) for s in sources for v in s.committed.values())
    assert run.report["totals"] == {"checked": checked, "missing": 0, "duplicated": 0, "altered": 0,
                                    "out_of_order": 0, "wrong_schema": 0}
    for source in sources:
        for p in range(PARTITIONS):
            assert run.counts(source.topic, p) == zero_counts(len(source.committed[p]))
    assert run.report["window"]["open_transactions"] == [
        {"topic": s.topic, "partition": p, "last_stable_offset": LAST_STABLE[p], "high_watermark": HIGH[p],
         "reason": "stopped at the last stable offset (a transaction is open)"}
        for s in sorted(sources, key=lambda s: s.topic) for p in OPEN_PARTITIONS]
    ranges = {(r["topic"], r["partition"]): (r["from"], r["to"]) for r in run.report["window"]["ranges"]}
    assert all(ranges[(s.topic, p)] == (0, LAST_STABLE[p]) for s in sources for p in OPEN_PARTITIONS)
    stopped = [e for e in run.logs() if "stopped at the last stable offset" in e.get("msg", "")]
    assert len(stopped) == len(sources) * len(OPEN_PARTITIONS)
    html = run.report_path.with_suffix(".html").read_text()
    assert html.count("stopped at the last stable offset (a transaction is open)") == len(sources) * len(OPEN_PARTITIONS)
    # The provenance-headed copy is mapped by its headers, the other by position.
    (read,) = [e for e in run.logs() if e.get("msg") == "destination read"]
    assert read["positional"] == sum(len(v) for v in sources[1].committed.values())
