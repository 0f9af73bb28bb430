"""Delivery errors tied to the source record's own partition, never to what its headers say.

The producers report errors only (delivery.report.only.error), and an error report carries the destination
topic, partition, key and value, not the source position (nor the headers). So every produce() names the
source partition through its on_delivery callable: one `RunDeliveryReport` per run of consecutive records
of one source partition in a batch (one object per run, not per record, keeps the hot path cheap). A
refused record is tied to the run's first offset: at or before the refused record, so its partition never
commits past it; at most the run's earlier records are mirrored again after a restart.
"""

from __future__ import annotations

from typing import Callable


class RunDeliveryReport:
    """The on_delivery callable of a run of one source partition's records, starting at `first_offset`."""

    __slots__ = ("on_refused", "source", "topic", "partition", "first_offset")

    def __init__(self, on_refused: Callable, source, topic: str, partition: int, first_offset: int) -> None:
        self.on_refused = on_refused  # (source, topic, partition, offset, error) -> None
        self.source = source
        self.topic = topic
        self.partition = partition
        self.first_offset = first_offset

    def __call__(self, err, _msg) -> None:
        if err is not None:
            self.on_refused(self.source, self.topic, self.partition, self.first_offset, err)
