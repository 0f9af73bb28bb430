"""ClientErrors alone (engine/client_errors.py), over in-memory collaborators: what a refused or undelivered record,
a failed side delivery and a consumer's error do to the partition and the run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.client_errors import ClientErrors
from mirror_worker.engine.delivery import RunDelivery
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics
from tests.unit.fakes import FakeError, FakeMessage


class _Halts:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def resend(self, stream, topic, partition, offset, reason) -> None:
        self.calls.append(("resend", topic, partition, offset))

    def halt(self, stream, topic, partition, offset, reason) -> None:
        self.calls.append(("halt", topic, partition, offset, reason))


def _errors(exactly_once: bool = False):
    config = build_mirror_config({
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g", "prefix": "dst.",
        **({"delivery": "exactly-once"} if exactly_once else {}),
    })
    halts, purges, resets = _Halts(), [], []
    state = RunState(5.0, lambda: 0.0)
    errors = ClientErrors(config, MirrorMetrics("m"), {"mirror": "m"}, state, halts,
                          position_reset=lambda stream, topic, partition, reason: resets.append((topic, partition)),
                          request_purge=lambda: purges.append(True))
    stream = SimpleNamespace(alias="src", assigned={("t", 0)}, instance_id=None)
    return errors, halts, purges, resets, state, stream


@pytest.mark.parametrize("exactly_once, purged", [(False, [True]), (True, [])])
def test_a_record_not_delivered_in_time_is_resent_from_its_run_never_halted(exactly_once, purged):
    """At-least-once the producers' queues are purged before the resend (their records would follow the resent
    ones out of order); exactly-once the aborted transaction drops them instead."""
    errors, halts, purges, _, state, stream = _errors(exactly_once)
    errors.refused_delivery(RunDelivery(None, stream, "t", 0, 40), FakeError(KafkaError._MSG_TIMED_OUT),
                            FakeMessage("dst.t", 0, 42))
    assert halts.calls == [("resend", "t", 0, 40)] and purges == purged and state.fatal is None


def test_a_refused_record_halts_its_partition_at_the_runs_first_offset_unless_the_partition_was_lost():
    errors, halts, purges, _, _, stream = _errors()
    refused = FakeError(KafkaError.INVALID_RECORD, "invalid record")
    errors.refused_delivery(RunDelivery(None, stream, "t", 0, 40), refused, FakeMessage("dst.t", 0, 42))
    assert [call[:4] for call in halts.calls] == [("halt", "t", 0, 40)] and purges == []
    stream.assigned = set()  # lost meanwhile: nothing of it was committed, the next owner mirrors it again
    errors.refused_delivery(RunDelivery(None, stream, "t", 0, 50), refused, FakeMessage("dst.t", 0, 52))
    assert len(halts.calls) == 1


def test_a_side_record_that_fails_stops_the_worker_unless_it_is_a_heartbeat_or_an_offset_sync():
    errors, _, _, _, state, _ = _errors()
    errors.delivery_error(FakeError(), FakeMessage(errors.config.heartbeat_topic, 0, 0))
    assert state.fatal is None
    errors.delivery_error(FakeError(text="broken"), FakeMessage("elsewhere", 3, 0))
    assert state.fatal == "delivery to elsewhere[3] failed: broken"


def test_a_reset_position_goes_to_the_assignment_and_a_fatal_consumer_error_stops_the_worker():
    errors, _, _, resets, state, stream = _errors()
    errors.consume_error(stream, FakeMessage("t", 0, 0), FakeError(KafkaError._AUTO_OFFSET_RESET))
    assert resets == [("t", 0)] and state.fatal is None
    errors.consume_error(stream, FakeMessage("t", 0, 0), FakeError(KafkaError._TRANSPORT))
    assert state.fatal is None
    errors.consume_error(stream, FakeMessage("t", 0, 0), FakeError(KafkaError._FATAL, "fenced", fatal=True))
    assert state.fatal is not None and "consumer failed" in state.fatal
