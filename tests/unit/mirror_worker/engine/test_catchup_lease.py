"""The worker's catch-up check at each assignment (mirror_worker/engine/catchup_lease.py)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from mirror_worker.engine import catchup_lease
from mirror_worker.engine.catchup_lease import CatchupCheck, CatchupRunning


def _answering(monkeypatch, result):
    def active_members(admin, group, timeout_s):
        if isinstance(result, BaseException):
            raise result
        return result

    monkeypatch.setattr(catchup_lease, "active_members", active_members)


def test_a_source_that_does_not_answer_is_said_and_the_worker_mirrors_on(monkeypatch, caplog):
    """A source leader killed: describing the lease group timed out after the bound, and the worker exited 1
    with `KafkaError{code=_TIMED_OUT}` from on_assign (test_broker_faults.py::test_source_leader_killed_mid_stream)."""
    _answering(monkeypatch, KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    with caplog.at_level(logging.WARNING, logger="mirror_worker"):
        CatchupCheck("g", 1.0)(admin=None)
    assert "cannot check for a running catch-up: the source did not answer" in caplog.text


def test_a_running_catchup_still_stops_the_worker(monkeypatch):
    _answering(monkeypatch, ["catchup-member"])
    with pytest.raises(CatchupRunning, match="a catch-up is copying the backlog of consumer group 'g'"):
        CatchupCheck("g", 1.0)(admin=None)
