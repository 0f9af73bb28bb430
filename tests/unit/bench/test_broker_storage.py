"""Brokers whose logs stay in memory (bench.common.memory_root, `bench.width --broker-storage memory`): a run
that cannot have them says so in one line before it starts any broker, and never silently falls back to disk
(its figures would then not be the ones its table claims)."""

from __future__ import annotations

import pytest

from bench import common
from bench.width import markdown


def test_the_memory_root_is_given_when_it_has_room(tmp_path):
    assert common.memory_root(1024, root=tmp_path) == tmp_path


def test_a_missing_tmpfs_is_refused_naming_the_option_to_use(tmp_path):
    with pytest.raises(SystemExit, match=r"memory: .*missing-shm does not exist.*--broker-storage disk"):
        common.memory_root(1024, root=tmp_path / "missing-shm")


def test_a_tmpfs_without_room_for_the_run_is_refused_with_both_sizes(tmp_path):
    with pytest.raises(SystemExit, match=r"GiB free, the run needs about 1048576\.0 GiB"):
        common.memory_root(2**50, root=tmp_path)


def test_only_kafka_only_stacks_can_keep_their_logs_in_memory():
    with pytest.raises(ValueError, match="'memory' for kafka_only"):
        with common.bench_stack(kafka_only=False, reuse_running=False, storage="memory"):
            pass


def test_the_table_says_where_the_brokers_kept_their_logs():
    meta = {"date": "d", "records": 10, "size": 100, "cpus": 2, "load_start": [1], "load_end": [1]}
    assert "two Kafka nodes (their logs in tmpfs)" in markdown([], {**meta, "broker_storage": "memory"})
    assert "two Kafka nodes (their logs on disk)" in markdown([], meta)  # tables written before the option
