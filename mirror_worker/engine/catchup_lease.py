"""A catch-up's hold on a mirror's group: no worker mirrors the partitions a Spark catch-up is copying.

The catch-up copies ranges that start at the mirror group's committed offsets and commits their ends when
they are delivered. A worker that started meanwhile would start at the same offsets and copy the same
records again. So, while a catch-up runs, a consumer of its own is a member of the group `<group>.catchup`
(kept by its heartbeats; gone within its session timeout if the job dies), and each side announces itself
before it checks the other, so that one of the two always sees the other:
- the catch-up joins `<group>.catchup`, then refuses to start while the mirror's group has an active member;
- a worker is a member of the mirror's group when its partitions are assigned: it then refuses to mirror
  while `<group>.catchup` has an active member, and exits without having copied anything (Airflow's retry,
  or a person, starts it again once the catch-up is done: it resumes at the ranges' ends).
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaError, KafkaException

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import client_callback
from mirror_worker.clients.groups import active_members
from mirror_worker.exceptions import MirrorError

CLIENT_ID = "kafka-mirror-catchup-lease"
log = logging.getLogger("mirror_worker")


def lease_group(group: str) -> str:
    return f"{group}.catchup"


class CatchupRunning(MirrorError):
    """A catch-up holds the mirror's group: the worker must not mirror now."""


class CatchupCheck:
    """The worker's check at each assignment: raises CatchupRunning while a catch-up holds `group`.

    A worker whose credentials may not describe the lease group (a literal group ACL) cannot check: it
    says so once and mirrors, as it did before the lease existed. Nor can it while the source cannot answer
    within the bound (its group coordinator's broker killed, a cut): it says so each time and mirrors, rather
    than exit on a broker failure (the fault test of a source leader kill did). Mutual exclusion still holds
    from the other side: a catch-up checks the mirror's group, which has this worker in it by now, before it
    copies (CatchupLease).
    """

    def __init__(self, group: str, timeout_s: float) -> None:
        self.group, self.timeout_s = group, timeout_s
        self.warned = False  # not authorized to describe the lease group: said once

    def __call__(self, admin) -> None:
        try:
            members = active_members(admin, lease_group(self.group), self.timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                log.warning("cannot check for a running catch-up: the source did not answer; mirroring", extra={
                    "group": self.group, "lease_group": lease_group(self.group), "error": exc.args[0].str()})
                return
            if not self.warned:
                self.warned = True
                log.warning("cannot check for a running catch-up: not authorized to describe its lease group",
                            extra={"group": self.group, "lease_group": lease_group(self.group)})
            return
        if members:
            raise CatchupRunning(
                f"a catch-up is copying the backlog of consumer group {self.group!r} (its lease group "
                f"{lease_group(self.group)!r} has a member): the worker exits without mirroring; start it again "
                "when the catch-up has finished")


class CatchupLease:
    """The catch-up's membership of `<group>.catchup` for as long as the job runs (a context manager).

    The member subscribes to one of the mirror's topics (a group needs a subscription to be joined) and
    pauses whatever it is assigned: it never fetches a record.
    """

    def __init__(self, connection: dict, group: str, topic: str, join_timeout_s: float = 60.0) -> None:
        self.consumer = factory.side_consumer(connection, lease_group(group), {
            "client.id": CLIENT_ID, "session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000})
        self.group, self.topic, self.join_timeout_s = group, topic, join_timeout_s
        self.joined = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._keep, name="catchup-lease", daemon=True)

    def _on_assign(self, consumer, partitions) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)
        self.joined.set()

    def _keep(self) -> None:
        while not self.stopped.is_set():
            self.consumer.poll(0.5)  # serves the group callbacks; paused partitions deliver nothing

    def __enter__(self) -> CatchupLease:
        self.consumer.subscribe([self.topic], on_assign=client_callback(self._on_assign))
        self.thread.start()
        deadline = time.monotonic() + self.join_timeout_s
        while not self.joined.wait(0.2):
            if time.monotonic() > deadline:
                self.__exit__()
                raise MirrorError(f"catch-up: could not join the lease group {lease_group(self.group)!r} "
                                  f"within {self.join_timeout_s:.0f}s")
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(10)
        self.consumer.close()  # leaves the group at once: a waiting worker may start
