"""A preload that lost records must fail, not look complete: flush empties the producer's queue whether its
records were written or refused, and the run after such a preload waited out its timeout for records that were
never there (bench.harness.Refusals, used by bench.harness.preload and bench.width.preload)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from bench.harness import Refusals


def test_refused_records_fail_the_preload_with_their_count_and_the_first_error():
    refusals = Refusals()
    refusals(None, object())  # delivered: with delivery.report.only.error it would not even call back
    refusals(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), object())
    refusals(KafkaError(KafkaError._MSG_TIMED_OUT), object())
    with pytest.raises(RuntimeError, match=r"preload of t: 2 records not written \(.*UNKNOWN_TOPIC_OR_PART"):
        refusals.check("preload of t")


def test_a_preload_with_no_refusal_passes_and_asks_only_for_failures():
    refusals = Refusals()
    refusals.check("preload")
    assert refusals.settings()["delivery.report.only.error"] is True
    assert refusals.settings()["on_delivery"] is refusals
