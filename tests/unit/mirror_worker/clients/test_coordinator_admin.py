"""clients/coordinator_admin.py: the consumer-group call process and the views built from its answers, with scripted
children (real processes that answer, hang or abort as librdkafka did)."""

from __future__ import annotations

import sys

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from mirror_worker.clients.coordinator_admin import CoordinatorProcess, IsolatingAdmin

# A child that answers requests as the script says: "ok" answers a describe, "abort" dies by SIGABRT,
# "hang" never answers, "timeout" answers librdkafka's timeout; one behaviour per line of its argument.
SCRIPT = r'''
import json, os, sys, time
plan = sys.argv[1].split(",")
sys.stdin.readline()  # the settings
for n, line in enumerate(sys.stdin):
    request = json.loads(line)
    step = plan[min(n, len(plan) - 1)]
    if step == "abort":
        os.abort()
    if step == "hang":
        time.sleep(60)
    if step == "timeout":
        reply = {"id": request["id"], "error": {"code": -185, "str": "Local: Timed out"}}
    elif request["call"] == "describe":
        reply = {"id": request["id"], "result": {"state": "STABLE", "members": [
            {"member_id": "m-1", "client_id": "c", "host": "/127.0.0.1", "assignment": [["t", 0], ["t", 2]]}]}}
    else:
        reply = {"id": request["id"], "result": [
            {"topic": "t", "partition": 0, "offset": 7, "metadata": "id", "error": None},
            {"topic": "t", "partition": 1, "offset": -1, "error": {"code": 25, "str": "Broker: Unknown member"}}]}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
'''


class Counting:
    """The command of a scripted child, counting how many were started."""

    def __init__(self, plan: str) -> None:
        self.plan, self.started = plan, 0

    def __call__(self) -> list[str]:
        self.started += 1
        return [sys.executable, "-c", SCRIPT, self.plan]


def _admin(plan: str, grace_s: float = 5.0) -> tuple[IsolatingAdmin, Counting]:
    command = Counting(plan)
    return IsolatingAdmin(object(), CoordinatorProcess({"bootstrap.servers": "x:1"}, "source 'a'", command, grace_s)), command


def test_a_description_comes_back_with_what_the_callers_read():
    admin, _ = _admin("ok")
    try:
        description = admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result()
        assert description.state is ConsumerGroupState.STABLE
        (member,) = description.members
        assert member.member_id == "m-1"
        assert [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions] == [("t", 0), ("t", 2)]
    finally:
        admin.close_coordinator_process()


def test_offsets_come_back_with_their_errors():
    admin, _ = _admin("ok")
    try:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("g")], request_timeout=5)["g"].result()
        ok, failed = result.topic_partitions
        assert (ok.topic, ok.partition, ok.offset, ok.metadata, ok.error) == ("t", 0, 7, "id", None)
        assert failed.error.code() == KafkaError.UNKNOWN_MEMBER_ID
        altered = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0, 7)])], request_timeout=5)["g"].result()
        assert altered.group_id == "g"
    finally:
        admin.close_coordinator_process()


def test_a_child_that_aborts_fails_its_call_and_the_next_call_starts_another():
    admin, command = _admin("abort,ok")
    try:
        with pytest.raises(KafkaException) as raised:
            admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result()
        assert raised.value.args[0].code() == KafkaError._TRANSPORT
        assert "exit status -6" in raised.value.args[0].str()
        command.plan = "ok"
        assert admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result().state is ConsumerGroupState.STABLE
        assert command.started == 2
    finally:
        admin.close_coordinator_process()


def test_a_child_that_does_not_answer_is_replaced():
    admin, command = _admin("hang", grace_s=0.5)
    try:
        with pytest.raises(KafkaException) as raised:
            admin.describe_consumer_groups(["g"], request_timeout=0.5)["g"].result()
        assert raised.value.args[0].code() == KafkaError._TIMED_OUT
        command.plan = "ok"
        assert admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result().members
        assert command.started == 2
    finally:
        admin.close_coordinator_process()


def test_a_timed_out_answer_retires_the_child_but_other_errors_keep_it():
    admin, command = _admin("timeout,ok")
    try:
        with pytest.raises(KafkaException) as raised:
            admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result()
        assert raised.value.args[0].code() == KafkaError._TIMED_OUT
        command.plan = "ok"
        admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result()
        admin.describe_consumer_groups(["g"], request_timeout=5)["g"].result()
        assert command.started == 2  # a new client after the timeout, then kept
    finally:
        admin.close_coordinator_process()


def test_other_calls_go_to_the_workers_own_client():
    class Own:
        def list_topics(self, timeout):
            return "own"

    admin = IsolatingAdmin(Own(), CoordinatorProcess({}, "x"))
    assert admin.list_topics(timeout=1) == "own"
