"""The lag sensor's trigger: takes lag samples in the triggerer until the window holds enough history.

Everything it needs travels in its (JSON) kwargs, which Airflow stores in its database: the spec's path and
the mirror's name (the spec is read here, so no resolved credential is ever stored), the samples so far and
the window. The blocking calls run in a thread so the triggerer's event loop stays free.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from mirror_airflow.lag.rules import PartitionKey, Sample, covers, merge_windows

EncodedWindows = list[list]  # [source, topic, partition, time, committed, high, low] per sample


def encode_windows(windows: dict[PartitionKey, list[Sample]]) -> EncodedWindows:
    return [[*key, s.time, s.committed, s.high, s.low] for key, window in windows.items() for s in window]


def decode_windows(rows: EncodedWindows) -> dict[PartitionKey, list[Sample]]:
    windows: dict[PartitionKey, list[Sample]] = {}
    for source, topic, partition, at, committed, high, low in rows:
        windows.setdefault((source, topic, int(partition)), []).append(Sample(at, committed, high, low))
    return windows


class MirrorLagTrigger(BaseTrigger):
    """Samples every `interval_s` until the windows cover `window_s`; the event carries all samples."""

    def __init__(self, spec_path: str, mirror_name: str, samples: EncodedWindows, window_s: float, interval_s: float,
                 measure_timeout_s: float = 30.0):
        super().__init__()
        self.spec_path = spec_path
        self.mirror_name = mirror_name
        self.samples = samples
        self.window_s = window_s
        self.interval_s = interval_s
        self.measure_timeout_s = measure_timeout_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "spec_path": self.spec_path, "mirror_name": self.mirror_name, "samples": self.samples, "window_s": self.window_s,
            "interval_s": self.interval_s, "measure_timeout_s": self.measure_timeout_s,
        })

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from mirror_airflow.lag.measure import MeasurementError, measure_partitions
        from mirror_worker.api import ConfigError, select_mirror

        windows = decode_windows(self.samples)
        try:
            config = await asyncio.to_thread(select_mirror, Path(self.spec_path), self.mirror_name)
            while not covers(windows, time.time(), self.window_s):
                await asyncio.sleep(self.interval_s)
                fresh = await asyncio.to_thread(measure_partitions, config, self.measure_timeout_s)
                windows = merge_windows(windows, fresh, time.time(), self.window_s)
                self.log.info("mirror %s: %d partition samples taken", config.name, len(fresh))
        except (MeasurementError, ConfigError) as exc:
            yield TriggerEvent({"error": str(exc)})
            return
        yield TriggerEvent({"samples": encode_windows(windows)})
