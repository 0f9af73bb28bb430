"""What the mirrored records' producers are built with beyond the operator's settings: their share of what is in
flight (sized from the destination's round trip, engine/inflight.py) and batches fitted to the destination topics.
Settings the operator named always win; the worker's other producers (heartbeats) get none of this."""

from __future__ import annotations

import logging

from mirror_worker.config.inflight import InflightSizes, producer_queue_kbytes_for
from mirror_worker.config.librdkafka import KAFKA_MAX_MESSAGE_BYTES, LIBRDKAFKA_MESSAGE_MAX_BYTES, fitted_to_topics

log = logging.getLogger("mirror_worker")


class ProducerSizing:
    def __init__(self, named: dict, queue_size: int, label: dict) -> None:
        self.named = named  # the producer settings as configured
        self.label = label
        self.queue_size = queue_size  # records in flight across the producers
        self.producer_queue_kbytes: int | None = None  # each producer's queue.buffering.max.kbytes, from the budget
        # batch.size fitted to the destination topics by refit: the configured one or lower; unnamed, what the
        # topics take (config/librdkafka.py fitted_to_topics).
        self.batch_bytes = int(fitted_to_topics(named, [])["batch.size"])
        # What refit gives for topics at Kafka's default limit, so that finding them replaces no producer (as
        # batch.size's DEFAULT_BATCH_SIZE): librdkafka's own 1,000,000 is under it, and every start replaced the
        # producers it had just made, 0.4-0.9 s before the first record at 100 ms. Raised by refit when needed.
        default_topics = fitted_to_topics(named, [KAFKA_MAX_MESSAGE_BYTES]).get("message.max.bytes")
        self.message_max_bytes: int | None = int(default_topics) if default_topics else None
        self.made_kbytes: list[int] = []  # each producer's queue.buffering.max.kbytes as last made (made)

    def resize(self, sizes: InflightSizes) -> None:
        self.queue_size = sizes.queue_size
        self.producer_queue_kbytes = sizes.producer_queue_kbytes

    def fitted(self, partitions: int | None = None) -> dict[str, str]:
        """The settings a mirrored records' producer gets on top of the named ones; `partitions`: how many it writes
        to (None or 0: not counted), which bound its bytes to a few batches each."""
        fitted = {"batch.size": str(self.batch_bytes)}
        if self.message_max_bytes is not None:
            fitted["message.max.bytes"] = str(self.message_max_bytes)
        if "queue.buffering.max.messages" not in self.named:
            fitted["queue.buffering.max.messages"] = str(self.queue_size)
        if self.producer_queue_kbytes is not None and "queue.buffering.max.kbytes" not in self.named:
            # Never under two of the largest records or batches: one larger than the bound is refused forever.
            largest = max(self.message_max_bytes or LIBRDKAFKA_MESSAGE_MAX_BYTES, self.batch_bytes)
            kbytes = producer_queue_kbytes_for(self.producer_queue_kbytes, partitions, self.batch_bytes)
            fitted["queue.buffering.max.kbytes"] = str(max(kbytes, 2 * largest // 1024 + 1))
        return fitted

    def kbytes(self, partitions: list[int]) -> list[int]:
        """The queue.buffering.max.kbytes of producers writing to these `partitions` each, as they are made now
        (empty when named, or not sized yet)."""
        kbytes = [self.fitted(count).get("queue.buffering.max.kbytes") for count in partitions]
        return [int(k) for k in kbytes if k is not None]

    def made(self, partitions: list[int]) -> list[int]:
        """The producers were made for these `partitions` each: their bytes, kept for outgrown."""
        self.made_kbytes = self.kbytes(partitions)
        return self.made_kbytes

    def outgrown(self, partitions: list[int]) -> bool:
        """Whether producers made now for these `partitions` would get more bytes than they were made with (topics
        made or grown since with more partitions than counted at start): the caller then replaces them, as for a
        refit. Fewer partitions never replace them."""
        return any(now > made for now, made in zip(self.kbytes(partitions), self.made_kbytes))

    def refit(self, limits) -> bool:
        """Fit batch.size within the smallest max.message.bytes of the destination topics (`limits`, every one known
        so far; unless named, as large as they take) and raise message.max.bytes above the largest (librdkafka
        refuses a larger record itself, 1 MB by default; it only goes up). Whether anything changed: the caller
        then replaces the producers once what they hold is delivered."""
        limits = list(limits)
        fitted = fitted_to_topics(self.named, limits)  # as the catch-up's producers are fitted
        wanted = int(fitted["batch.size"])
        largest = int(fitted["message.max.bytes"]) if "message.max.bytes" in fitted else None
        if largest is not None and largest <= (self.message_max_bytes or 0):
            largest = None
        if wanted == self.batch_bytes and largest is None:
            return False
        if wanted != self.batch_bytes:
            log.info(f"producer batch.size {'lowered' if wanted < self.batch_bytes else 'raised'} to fit the "
                     "destination topics", extra={
                         **self.label, "batch_size": wanted, "smallest_max_message_bytes": min(limits, default=None)})
        if largest is not None:
            log.info("producer message.max.bytes raised to fit the destination topics", extra={
                **self.label, "message_max_bytes": largest, "largest_max_message_bytes": max(limits),
            })
            self.message_max_bytes = largest
        self.batch_bytes = wanted
        return True
