"""Committed data only, without servers: which partitions a job names as stopped at their last stable offset,
the (low, end) bounds the jobs plan on, and the isolation level Spark's Kafka source is given."""

from __future__ import annotations

import argparse

import pytest

from mirror_worker.clients.log_ends import reads_committed
from spark_jobs.common.job_config import JobTarget, target_from_args
from spark_jobs.common.stable_offsets import LogEnds, OpenTransaction, isolation_option, open_transactions, reachable

ENDS = {
    ("t", 0): LogEnds(0, 22, 27),    # a transaction open from offset 22
    ("t", 1): LogEnds(0, 24, 24),    # none open
    ("u", 0): LogEnds(5, 19, 24),
}


@pytest.mark.parametrize("case, range_ends, expected", [
    ("every range at its end", {("t", 0): 22, ("t", 1): 24, ("u", 0): 19}, [("t", 0, 22, 27), ("u", 0, 19, 24)]),
    ("a range ending before the LSO (a --to-timestamp)", {("t", 0): 10, ("u", 0): 19}, [("u", 0, 19, 24)]),
    ("only the partitions of the window", {("t", 1): 24}, []),
])
def test_open_transactions_names_the_ranges_that_stop_at_an_lso_below_the_high_watermark(case, range_ends, expected):
    found = open_transactions(range_ends, ENDS)
    assert [(o.topic, o.partition, o.last_stable, o.high) for o in found] == expected


def test_an_open_transaction_says_where_it_stopped():
    transaction = OpenTransaction("t", 0, 22, 27)
    assert transaction.line() == ("t[0] stopped at the last stable offset 22 (a transaction is open; "
                                  "high watermark 27)")
    assert transaction.summary() == {"topic": "t", "partition": 0, "last_stable_offset": 22, "high_watermark": 27,
                                     "reason": "stopped at the last stable offset (a transaction is open)"}


def test_jobs_plan_on_the_end_the_reader_reaches():
    assert reachable(ENDS) == {"t": {0: (0, 22), 1: (0, 24)}, "u": {0: (5, 19)}}


@pytest.mark.parametrize("settings, committed", [
    ({}, True),                                           # librdkafka's default, as the worker runs
    ({"isolation.level": "read_committed"}, True),
    ({"isolation.level": "read_uncommitted"}, False),
])
def test_spark_reads_the_source_as_the_worker_and_the_destination_committed(settings, committed):
    assert reads_committed(settings) is committed
    target = JobTarget("s:1", "d:1", ("t",), source_settings=settings)
    assert target.spark_options("source")["kafka.isolation.level"] == ("read_committed" if committed
                                                                       else "read_uncommitted")
    assert target.spark_options("destination")["kafka.isolation.level"] == "read_committed"
    assert isolation_option(committed) == {"kafka.isolation.level": target.spark_options("source")[
        "kafka.isolation.level"]}


def test_a_spec_that_reads_uncommitted_is_followed(tmp_path):
    from tests.worker_util import write_mirror_spec

    spec = write_mirror_spec(tmp_path / "mirrors.yaml", None, "m", "t", None, source="s:1", destination="d:1",
                             source_kafka={"isolation.level": "read_uncommitted"})
    args = argparse.Namespace(config=str(spec), mirror="m", source_bootstrap=None, destination_bootstrap=None,
                              topics="t", prefix=None, group_id=None)
    target = target_from_args(args)
    assert not target.reads_committed
    assert target.spark_options("source")["kafka.isolation.level"] == "read_uncommitted"
