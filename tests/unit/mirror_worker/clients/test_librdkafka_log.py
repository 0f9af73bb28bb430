"""librdkafka's own log lines are redacted like the project's (issue 46: a secret client.id printed raw)."""

from __future__ import annotations

import logging
import time

from mirror_worker import redaction
from mirror_worker.clients import factory


def test_a_real_clients_lines_never_show_a_registered_secret(caplog):
    secret = "demo-fernet-key-value"
    redaction.register_secret(secret)
    with caplog.at_level(logging.DEBUG, logger="mirror_worker.librdkafka"):
        producer = factory.producer({"bootstrap.servers": "127.0.0.1:1", "client.id": secret, "debug": "generic"})
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            producer.poll(0.1)
        del producer
    lines = [r.getMessage() for r in caplog.records if r.name == "mirror_worker.librdkafka"]
    assert lines and any("[redacted]#producer-" in line for line in lines), lines[:3]
    assert not any(secret in line for line in lines)
