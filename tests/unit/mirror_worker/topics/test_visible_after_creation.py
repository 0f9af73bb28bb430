"""DestinationTopics waits for a new topic to be visible within its timeout, not a fixed ten seconds: a broker busy
with thousands of partitions showed a new internal topic later than that (bench/width.py at 5,000 partitions:
`destination topics not visible after creation: <mirror>.mirror.eos-positions`, the worker exited 1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mirror_worker.config.model import TopicCreation
from mirror_worker.topics.admin import DestinationTopics, TopicCreationError


class SlowMetadata:
    """list_topics that shows `topic` only from `visible_at` (clock seconds) on."""

    def __init__(self, clock, topic: str, visible_at: float) -> None:
        self.clock, self.topic, self.visible_at = clock, topic, visible_at

    def list_topics(self, timeout=None):
        partition = SimpleNamespace(replicas=[1])
        topics = {self.topic: SimpleNamespace(error=None, partitions={0: partition})} \
            if self.clock.now >= self.visible_at else {}
        return SimpleNamespace(topics=topics)



def test_a_topic_visible_after_twelve_seconds_is_waited_for_within_the_timeout(clock):
    destination = DestinationTopics(SlowMetadata(clock, "m.mirror.eos-positions", 12.0), TopicCreation(), False, 30.0)
    assert destination._partition_counts(["m.mirror.eos-positions"]) == {"m.mirror.eos-positions": 1}


def test_a_topic_never_visible_fails_once_the_timeout_passed(clock):
    destination = DestinationTopics(SlowMetadata(clock, "t", 999.0), TopicCreation(), False, 30.0)
    with pytest.raises(TopicCreationError, match="not visible after creation: t"):
        destination._partition_counts(["t"])
    assert 30.0 <= clock.now <= 31.0
