"""What the topics tests share: a clock that moves only when DestinationTopics sleeps."""

from __future__ import annotations

import pytest

from mirror_worker.topics import admin as topics_admin


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    """DestinationTopics' `time`, replaced: its waits pass without sleeping."""
    clock = Clock()
    monkeypatch.setattr(topics_admin, "time", clock)
    return clock
