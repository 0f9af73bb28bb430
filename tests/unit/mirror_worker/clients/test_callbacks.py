"""A confluent-kafka method that fails inside a callback of another client's poll(): what the poll() raises.

No server: both clients point at a closed port, so the consumer's error_cb fires ("connection refused")
and the other consumer's committed() inside it times out at once. Without the guard, poll() raises a bare
KafkaError, which no `except` clause catches (found as a worker's close thread ending on one, with a
traceback that could not be printed, in a full test run); with `client_callback` it raises the
KafkaException that committed() raised.
"""

from __future__ import annotations

import sys

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from mirror_worker.clients.callbacks import client_callback

CLOSED = "127.0.0.1:1"


def _poll_until_the_callback_fails(guard) -> tuple:
    quiet = {"bootstrap.servers": CLOSED, "group.id": "callback-test", "log_level": 0}
    other = Consumer(quiet)

    calls = []

    def on_error(_err):
        # Once: a later error served by close() must not raise out of the test's `finally` as well.
        if not calls:
            calls.append(1)
            other.committed([TopicPartition("t", 0)], timeout=0.01)

    consumer = Consumer({**quiet, "error_cb": guard(on_error)})
    try:
        for _ in range(40):
            consumer.poll(0.25)
    except BaseException as exc:  # noqa: BLE001 - what a worker's `except` sees
        return "caught", exc
    except:  # noqa: E722 - not a BaseException: only a bare except reaches it
        return "uncatchable", sys.exc_info()[1]
    finally:
        consumer.close()
        other.close()
    pytest.fail("the error callback never ran")


def test_without_the_guard_the_failure_is_not_an_exception():
    kind, value = _poll_until_the_callback_fails(lambda fn: fn)
    assert kind == "uncatchable" and type(value) is KafkaError


def test_with_the_guard_it_is_the_kafka_exception_raised_in_the_callback():
    kind, value = _poll_until_the_callback_fails(client_callback)
    assert kind == "caught" and type(value) is KafkaException
    assert value.args[0].code() == KafkaError._TIMED_OUT
