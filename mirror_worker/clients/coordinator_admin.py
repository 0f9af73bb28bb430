"""Consumer-group admin calls of a long-running worker, made in a helper process that may die alone.

librdkafka 2.16 aborts the whole process (`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0`,
librdkafka issue 4605, fix proposed in PR 5397) when a coordinator-targeted Admin API request
(DescribeConsumerGroups, ListConsumerGroupOffsets, AlterConsumerGroupOffsets) meets a dropped or dead
connection. A WAN cut or a broker restart is exactly that: the fault run of a two-minute source outage
killed the worker with SIGABRT 30 s after the link came back, from its catch-up check's describe.

So the worker's admin clients hand these three calls to a child process (`mirror_worker.clients.coordinator_child`)
that keeps its own AdminClient; every other call goes to the worker's own client. A child that aborts fails
the one call in flight as a transport error (the callers already treat that as "the cluster did not answer")
and the next call starts a new child. Results come back as small views with the attributes the callers read.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

log = logging.getLogger("mirror_worker")
# After these the child's AdminClient is not asked again: once its coordinator connection met a cut, librdkafka
# 2.16's client timed out every describe for minutes after the link was back (test_coordinator_calls.py).
_STALE_CLIENT = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
# Beyond the call's own timeout: a child's start-up (Python and librdkafka) and its answer.
_GRACE_S = 15.0


@dataclass(frozen=True)
class Assignment:
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: Assignment


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: ConsumerGroupState
    members: list[Member] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionOffset:
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    error: KafkaError | None = None


@dataclass(frozen=True)
class GroupOffsets:
    group_id: str
    topic_partitions: list[PartitionOffset]


def _child_command() -> list[str]:
    return [sys.executable, "-m", "mirror_worker.clients.coordinator_child"]


class CoordinatorProcess:
    """One child at a time, started on first use and again after it died; calls are serialized."""

    def __init__(self, settings: dict, what: str, command: Callable[[], list[str]] = _child_command,
                 grace_s: float = _GRACE_S) -> None:
        self.settings, self.what, self.command, self.grace_s = settings, what, command, grace_s
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.answers: queue.Queue = queue.Queue()
        self.next_id = 0
        self.restarts = 0

    def call(self, request: dict, timeout: float) -> dict:
        """The child's answer to `request`; KafkaException when it fails, times out or the child dies."""
        with self.lock:
            proc = self._running()
            self.next_id += 1
            request = {**request, "id": self.next_id}
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                return self._died(proc)
            while True:
                try:
                    answer = self.answers.get(timeout=timeout + self.grace_s)
                except queue.Empty:
                    self._stop(proc)
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{self.what}: no answer from the "
                                                    f"consumer-group request process within {timeout + self.grace_s:.0f}s"))
                if answer is None:  # its stdout closed: it died
                    return self._died(proc)
                if answer.get("id") == request["id"]:
                    break  # an older id is the late answer of a call that timed out
            if "error" in answer:
                if answer["error"]["code"] in _STALE_CLIENT:
                    self._stop(proc)
                raise KafkaException(KafkaError(answer["error"]["code"], answer["error"]["str"]))
            return answer["result"]

    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                self._stop(self.proc)

    def _running(self) -> subprocess.Popen:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        # stderr is the worker's own: the child's log lines (and librdkafka's abort message) land in its log.
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        self.answers = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.answers), name="coordinator-calls",
                         daemon=True).start()
        self.proc.stdin.write(json.dumps({"settings": self.settings}) + "\n")
        self.proc.stdin.flush()
        return self.proc

    @staticmethod
    def _read(proc: subprocess.Popen, answers: queue.Queue) -> None:
        for line in proc.stdout:
            try:
                answers.put(json.loads(line))
            except ValueError:
                continue  # not an answer (a stray line on stdout)
        answers.put(None)

    def _died(self, proc: subprocess.Popen) -> dict:
        status = proc.wait()
        self.proc = None
        self.restarts += 1
        log.warning("the consumer-group request process died; the next call starts another", extra={
            "cluster": self.what, "exit_status": status, "known_cause": "librdkafka issue 4605" if status == -6 else None})
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, f"{self.what}: the consumer-group request process "
                                        f"died (exit status {status}) before it answered"))

    def _stop(self, proc: subprocess.Popen) -> None:
        proc.kill()
        proc.wait()
        if self.proc is proc:
            self.proc = None


def _done(make: Callable[[], object]) -> Future:
    future: Future = Future()
    try:
        future.set_result(make())
    except KafkaException as exc:
        future.set_exception(exc)
    return future


def _description(group: str, answer: dict) -> GroupDescription:
    members = [Member(m["member_id"], m["client_id"], m["host"],
                      Assignment([TopicPartition(t, p) for t, p in m["assignment"]])) for m in answer["members"]]
    return GroupDescription(group, ConsumerGroupState[answer["state"]], members)


def _offsets(group: str, answer: list) -> GroupOffsets:
    return GroupOffsets(group, [PartitionOffset(p["topic"], p["partition"], p["offset"], p.get("metadata"),
                                                KafkaError(p["error"]["code"], p["error"]["str"]) if p.get("error") else None)
                                for p in answer])


class IsolatingAdmin:
    """An AdminClient whose consumer-group calls run in a CoordinatorProcess; the rest go to `admin`.

    The three calls take the arguments the callers pass (a list of group ids or of one
    ConsumerGroupTopicPartitions, `request_timeout`) and return done futures, as AdminClient's do.
    """

    def __init__(self, admin, process: CoordinatorProcess) -> None:
        self.admin, self.process = admin, process

    def __getattr__(self, name: str):
        return getattr(self.admin, name)

    def describe_consumer_groups(self, group_ids: list[str], request_timeout: float = 30.0, **_kwargs) -> dict:
        def one(group: str) -> GroupDescription:
            answer = self.process.call({"call": "describe", "group": group, "timeout": request_timeout}, request_timeout)
            return _description(group, answer)
        return {group: _done(lambda g=group: one(g)) for group in group_ids}

    def list_consumer_group_offsets(self, requests: list, request_timeout: float = 30.0, **_kwargs) -> dict:
        (request,) = requests  # librdkafka takes one group per call too
        partitions = None if request.topic_partitions is None else \
            [[tp.topic, tp.partition] for tp in request.topic_partitions]
        return {request.group_id: _done(lambda: _offsets(request.group_id, self.process.call(
            {"call": "list_offsets", "group": request.group_id, "partitions": partitions, "timeout": request_timeout},
            request_timeout)))}

    def alter_consumer_group_offsets(self, requests: list, request_timeout: float = 30.0, **_kwargs) -> dict:
        (request,) = requests
        offsets = [[tp.topic, tp.partition, tp.offset] for tp in request.topic_partitions]
        return {request.group_id: _done(lambda: _offsets(request.group_id, self.process.call(
            {"call": "alter_offsets", "group": request.group_id, "offsets": offsets, "timeout": request_timeout},
            request_timeout)))}

    def close_coordinator_process(self) -> None:
        self.process.close()
