"""Waiting on the mirror from an e2e test: a polled condition, the consumer group's members."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient


def wait_until(predicate, timeout: float, what: str, interval: float = 1.0):
    """Poll `predicate` until it returns something true (returned), else fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {value!r})")


def group_members(bootstrap: str, group: str) -> int:
    from mirror_airflow.operators.handover import group_members as members

    return members(AdminClient({"bootstrap.servers": bootstrap}), group)
