"""Fencing earlier writers of the partitions a worker (or a catch-up task) is about to write.

`init_transactions` with a transactional.id bumps that id's producer epoch on the destination: the open
transaction of whoever held it is aborted, and everything it sends from then on is refused (fenced). A new
owner of a partition fences the writer its position names (transactions.py says why that is enough)
before it reads the position for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import KafkaError, KafkaException, Producer

from mirror_worker.clients import factory
from mirror_worker.exceptions import MirrorError, StopInterrupted

log = logging.getLogger("mirror_worker")

# Transactional ids fenced at the same time, each in a thread of its own: the calls wait on the destination.
PARALLEL_FENCES = 8
# One init_transactions call waits at most this long before a stop request is looked at again. librdkafka
# resumes the same init on the next call ("retry call to resume"), so slicing the wait changes nothing else;
# a whole start-up timeout in one call held a SIGTERM for as long (81 s after it, test_shutdown_bounds).
STOP_CHECK_S = 1.0


def connect(producer: Producer, topic: str, timeout_s: float, attempts: int = 3) -> None:
    """Return once a broker the metadata named (not a bootstrap address) answered the producer.

    An init_transactions that finds no broker connection up looks for the transaction coordinator again only
    500 ms later. One metadata request is not enough: it is answered through the bootstrap connection, which
    librdkafka closes as soon as it learns the brokers' own names, so the producer is again without a
    connection. Measured on the local stack: init_transactions took ~500 ms after one request, 3 ms once
    broker 1 itself had answered (a new producer at startup, at a failover, after a fault)."""
    for _ in range(attempts):
        try:
            if producer.list_topics(topic, timeout=timeout_s).orig_broker_id >= 0:
                return
        except KafkaException:
            return  # the destination does not answer: init_transactions waits for it as before


def init_transactions(producer: Producer, timeout_s: float, what: str,
                      stopping: Callable[[], bool] = lambda: False) -> None:
    """producer.init_transactions, again while its error is retriable, within `timeout_s` in all (MirrorError);
    StopInterrupted once `stopping()`, looked at every STOP_CHECK_S.

    Never given up while it runs (unlike send_offsets, bounded_call.py): an init left running could finish
    later and fence the producer that replaced it. A stop gives up between two calls, where no replacement
    follows: the producer is dropped with the worker."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.init_transactions(max(0.5, min(STOP_CHECK_S, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            error = exc.args[0]
            if not error.retriable():
                raise MirrorError(f"exactly-once init of {what} failed: {error.str()}") from None
            if stopping():
                raise StopInterrupted(f"exactly-once init of {what} stopped: the worker is stopping") from None
            if time.monotonic() > deadline:  # a cluster's first transactions wait for __transaction_state
                raise MirrorError(f"exactly-once init of {what} failed: no answer within {timeout_s:.0f}s "
                                  f"(startup-timeout-s): {error.str()}") from None
            if error.code() != KafkaError._TIMED_OUT:  # a refusal: asked again shortly; a timeout resumes at once
                time.sleep(0.2)


def fence(producer_settings: dict, ids: Iterable[str], topic: str, timeout_s: float,
          stopping: Callable[[], bool] = lambda: False) -> None:
    """Fence every transactional.id of `ids` (MirrorError naming the first that failed; StopInterrupted once
    `stopping()`). `topic` is a destination topic to reach a broker through (see connect)."""
    ids = sorted(set(ids))
    if not ids:
        return

    def one(transactional_id: str) -> None:
        if stopping():
            raise StopInterrupted("exactly-once fencing stopped: the worker is stopping")
        producer = factory.producer(producer_settings, {"transactional.id": transactional_id})
        connect(producer, topic, timeout_s)
        init_transactions(producer, timeout_s, f"the earlier writer {transactional_id}", stopping)

    log.info("fencing earlier exactly-once writers", extra={"writers": ids[:20], "count": len(ids)})
    if len(ids) == 1:
        one(ids[0])
        return
    with ThreadPoolExecutor(min(PARALLEL_FENCES, len(ids)), thread_name_prefix="fence") as pool:
        for failed in pool.map(_caught(one), ids):
            if failed is not None:
                raise failed


def _caught(call):
    def run(arg):
        try:
            call(arg)
        except MirrorError as exc:
            return exc
        return None
    return run
