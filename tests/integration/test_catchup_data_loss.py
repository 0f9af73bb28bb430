"""Catch-up meets records deleted before they were mirrored: it decides as the worker does (decide_start),
halts and reports the partition by default, or with on_data_loss reset starts at the earliest record and
reports the skipped range."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.catchup_util import catchup_summary, run_catchup
from tests.kafka_util import consume_all, create_topic, produce
from tests.worker_util import committed_offsets, write_mirror_spec

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3


def _backlog_with_a_gap(src: str, topic: str, group: str) -> None:
    """30 records a partition, the group at 10 everywhere, then partition 0 truncated before 20."""
    create_topic(src, topic, partitions=PARTITIONS)
    produce(src, topic, [{"value": f"r-{p}-{i}".encode(), "partition": p} for p in range(PARTITIONS) for i in range(30)])
    committer = Consumer({"bootstrap.servers": src, "group.id": group, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, p, 10) for p in range(PARTITIONS)], asynchronous=False)
    finally:
        committer.close()
    admin = AdminClient({"bootstrap.servers": src})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        assert future.result(30).low_watermark == 20


def _commit_metadata(bootstrap: str, group: str, topic: str) -> dict[int, str]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {tp.partition: tp.metadata for tp in
                reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    finally:
        reader.close()


def _topic_id(bootstrap: str, topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_topics(TopicCollection([topic])).values()
    return str(future.result(30).topic_id)


def test_records_deleted_past_the_group_offset_halt_that_partition_and_exit_3(stack, topic_name):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cu-loss")
    group = f"g-{topic}"
    _backlog_with_a_gap(src, topic, group)

    result = run_catchup("--source.bootstrap.servers", src, "--destination.bootstrap.servers", dst,
                      "--topics", topic, "--group.id", group, "--prefix", "cl.")

    assert result.returncode == 3, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if "data loss" in line]
    assert errors == [
        f"catchup: data loss: {topic}[0]: records 10..19 were deleted from the source (retention) before they were "
        f"mirrored; earliest offset now 20; {topic}[0] not copied, its group offset not moved (on_data_loss=halt)"
    ]
    assert committed_offsets(src, group, topic, PARTITIONS) == {0: 10, 1: 30, 2: 30}
    # The catch-up commits carry the topic id as the worker's do; partition 0 keeps the test's own commit.
    assert _commit_metadata(src, group, topic) == {0: None, 1: _topic_id(src, topic), 2: _topic_id(src, topic)}
    copied = consume_all(dst, f"cl.{topic}", 40, timeout=30)
    assert sorted(m.value() for m in copied) == sorted(f"r-{p}-{i}".encode() for p in (1, 2) for i in range(10, 30))
    summary = catchup_summary(result)
    assert summary["records"] == 40
    assert summary["data_loss"] == [{
        "topic": topic, "partition": 0, "kind": "truncated", "position": 10, "earliest": 20, "lost": [10, 19],
        "action": "halt",
        "reason": f"{topic}[0]: records 10..19 were deleted from the source (retention) before they were mirrored; "
                  "earliest offset now 20",
    }]
    assert [(r["partition"], r["start"], r["end"]) for r in summary["ranges"]] == [(1, 10, 30), (2, 10, 30)]


def test_on_data_loss_reset_copies_from_the_earliest_and_reports_the_skipped_range(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cu-reset")
    group = f"g-{topic}"
    _backlog_with_a_gap(src, topic, group)
    spec = write_mirror_spec(tmp_path / "mirrors.yaml", stack, "reset-copy", topic, "cr.", group="local", source_name=None,
                             **{"preserve-partitions": "true", "group-id": f'"{group}"', "on-data-loss": "reset"})

    result = run_catchup("--config", str(spec), "--mirror", "reset-copy")

    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"catchup: data loss: {topic}[0]: records 10..19 were deleted from the source (retention) before they "
            f"were mirrored; earliest offset now 20; copying {topic}[0] from offset 20 (on_data_loss=reset)"
            in result.stderr.splitlines())
    assert committed_offsets(src, group, topic, PARTITIONS) == {0: 30, 1: 30, 2: 30}
    copied = consume_all(dst, f"cr.{topic}", 50, timeout=30)
    assert sorted(m.value() for m in copied) == sorted(
        [f"r-0-{i}".encode() for i in range(20, 30)] + [f"r-{p}-{i}".encode() for p in (1, 2) for i in range(10, 30)])
    summary = catchup_summary(result)
    assert summary["records"] == 50
    assert [(e["partition"], e["kind"], e["lost"], e["action"]) for e in summary["data_loss"]] == [
        (0, "truncated", [10, 19], "reset")]
    assert [(r["partition"], r["start"], r["end"]) for r in summary["ranges"]] == [(0, 20, 30), (1, 10, 30), (2, 10, 30)]
