"""The consumer-group request process of mirror_worker/clients/coordinator_admin.py (see why there).

Reads JSON lines on stdin: first {"settings": {...}} (the cluster's connection settings), then requests
{"id", "call", "group", "timeout", ...}; writes one JSON line per request on stdout: {"id", "result"} or
{"id", "error": {"code", "str"}}. Exits when stdin closes (its worker is gone). Its log lines go to stderr,
which is the worker's.
"""

from __future__ import annotations

import json
import sys

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from mirror_worker.clients import factory
from mirror_worker.clients.groups import group_commits
from mirror_worker.logs import configure_logging


def _error(error) -> dict:
    return {"code": error.code(), "str": error.str()}


def _partitions(topic_partitions) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset, "metadata": tp.metadata,
             "error": _error(tp.error) if tp.error else None} for tp in topic_partitions or []]


def answer(admin, settings: dict, request: dict):
    group, timeout = request["group"], float(request["timeout"])
    if request["call"] == "describe":
        description = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout + 5)
        return {"state": description.state.name, "members": [
            {"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
             "assignment": [[tp.topic, tp.partition] for tp in (m.assignment.topic_partitions or [])]}
            for m in description.members or []]}
    if request["call"] == "list_offsets":  # through a consumer: the admin's call may crash (groups.group_commits)
        partitions = request["partitions"]
        return _partitions(group_commits(settings, group, None if partitions is None else
                                         [(t, p) for t, p in partitions], timeout))
    if request["call"] == "alter_offsets":
        wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for t, p, o in request["offsets"]])
        return _partitions(admin.alter_consumer_group_offsets([wanted], request_timeout=timeout)[group].result(
            timeout + 5).topic_partitions)
    raise ValueError(f"unknown call {request['call']!r}")


def main() -> None:
    configure_logging(stream=sys.stderr)  # stdout carries the answers
    first = sys.stdin.readline()
    if not first:
        return
    settings = json.loads(first)["settings"]
    admin = factory.admin_client(settings)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"id": request["id"], "result": answer(admin, settings, request)}
        except KafkaException as exc:
            reply = {"id": request["id"], "error": _error(exc.args[0])}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
