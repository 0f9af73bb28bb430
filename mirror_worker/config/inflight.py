"""What the worker holds in flight toward the destination, sized from the destination's round trip within a memory
budget in bytes (issue 45). Pure: the worker measures the round trip (clients/round_trip.py), logs and exports what
this chooses (engine/inflight.py).

Three things hold records between the source and the destination's acknowledgement:
- each source consumer's prefetch, `queued.max.messages.kbytes` (CONSUMER_DEFAULTS: 16 MiB), which librdkafka
  may overshoot by one fetch response (`fetch.max.bytes`);
- the records handed to the producers and not yet acknowledged: `queue_size` records across every producer
  (the worker's own bound, engine/backpressure.py), each producer's `queue.buffering.max.messages` equal to it;
- the bytes of those records: each producer's `queue.buffering.max.kbytes` (librdkafka's default, 1 GiB, never
  bound before: 10,000 records of 1 MB each would have been 10 GB);
- what each of those records costs librdkafka beyond its bytes (RECORD_OVERHEAD_BYTES), which no setting bounds
  but the record count.

A partition's records cross to its leader about one batch per round trip, so a destination far away needs more
records in flight to keep the same rate: `queue_size` follows the round trip. The bytes follow the budget: the
consumers' prefetch is counted as configured, then the records' overhead, and the producers share what is left
for their bytes. Whatever the settings name wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mirror_worker.config.fetch_sizes import WAN_FETCH_MAX_BYTES, is_near
from mirror_worker.config.librdkafka import CONSUMER_DEFAULTS

MIB = 1024 * 1024
# In-flight data of one worker process, unless the spec (`inflight-budget-bytes`) or the flag
# (--inflight.budget.bytes) says otherwise. The goal is a worker under 200 MiB of RSS; the interpreter and its
# clients (~30 MiB), librdkafka's request and response buffers and what the allocator keeps take 60-100 MiB of it
# on the bench (stop 66, docs/benchmarks/wan.md): a far destination with every queue full can pass 200.
DEFAULT_INFLIGHT_BUDGET_BYTES = 128 * MIB
MIN_INFLIGHT_BUDGET_BYTES = 16 * MIB

# queue_size near the destination (loopback, one datacenter): the worker's long-standing default, which the
# bench's loopback copy never waited on.
LOOPBACK_QUEUE_SIZE = 10_000
# Far from it: enough records for QUEUE_RATE records/s through QUEUE_ROUND_TRIPS round trips in flight
# (docs/operations/wan.md's rule of 3 x rate x RTT). 450,000 records/s is about the loopback copy rate of 100 B
# records on the bench since stop 64 (411,892-508,927 msgs/s copied, 2026-12-02); 300,000 before. With 300,000 the
# record count held the copy of 100 B records 50 ms away at 254-268K msgs/s, each record in flight ~3.3 round trips;
# with 450,000 (67,500 records at 50 ms) 294-299K, 5.3-5.8 against 6.0-6.7 CPU-s per million, 9 MiB more at the peak
# (bench.wan side by side, 3 repeats each; bench/results/stop69-queue/). At 1 KiB the producers' bytes bind first.
# Earlier, 1 KiB at 50 ms: 10,000 records held the copy at 51 % of loopback, 40,000 at 70 %, 50,000 at 69 %.
QUEUE_RATE = 450_000
QUEUE_ROUND_TRIPS = 3
# 200 ms away: 270,000 wanted, held at 180,000 (as with 300,000 records/s before): 100 B records there cost ~360 B
# each beyond their bytes, and 180,000 of them already took the worker to ~230 MiB (stop 66).
MAX_QUEUE_SIZE = 180_000
# Not measured (the destination did not answer the probe): taken as a WAN this far away, as fetch_sizes_for does.
UNMEASURED_ROUND_TRIP_S = 0.05
# What each record handed to a producer costs beyond its key and value until it is acknowledged: librdkafka's
# message (~220 B with the allocator's share, at any record size; the delivery callback adds nothing measurable:
# bench.record_cost), its share of the request and compression buffers of the batches in flight.
# queue.buffering.max.kbytes counts only the key and value, so the budget counts this for every record queue_size
# allows. Measured on the bench with the destination 200 ms away, 1M records (bench.wan, 2026-12-01, stop 66):
# 180,000 records of 100 B in flight took the worker's peak RSS 75 MiB above loopback's 10,000 (~460 B a record,
# its 100 B included); records of 1 KiB, ~94,000 held by the 96 MiB byte bound, 131 MiB above (~1,460 B a record).
RECORD_OVERHEAD_BYTES = 400
# Batches per partition the producers' bytes hold at most, where the partitions they write to are counted (at start,
# then as topic refreshes find more: engine/mirrored_producers.py fit_partitions).
# librdkafka's idempotent producer sends a partition's next request only once the one in flight is answered: the
# destination takes one batch per partition per round trip, however far away it is. One batch in flight, one ready and
# one filling keep every partition busy; bytes beyond only wait in the queue, and cost memory and the CPU of the
# producer's broker thread, which spins while a batch waits (bench.wan, 1 KiB, 6 partitions copied, 18 MiB against the
# budget's share of 73 / 39 MiB 100 / 200 ms away: the same copy rate, peak RSS 164 against 230 MiB and 162 against
# 189, 7.6 against 8.5 CPU-s and 10.5 against 11.9; docs/benchmarks/wan.md, stop 67).
BATCHES_PER_PARTITION = 3
# What a producer's queue.buffering.max.kbytes never goes under: a record larger than a producer's byte bound
# would be refused forever (librdkafka counts it against the bound even in an empty queue). The worker also keeps
# it above twice the largest record the destination topics take (engine/worker.py _fitted).
MIN_PRODUCER_QUEUE_BYTES = 8 * MIB


@dataclass(frozen=True)
class InflightSizes:
    """What the worker holds in flight, and which of it the settings named (`named`: setting -> True)."""

    round_trip_s: float | None
    budget_bytes: int
    queue_size: int
    producer_queue_kbytes: int  # each producer's queue.buffering.max.kbytes
    consumer_queue_bytes: int  # every source consumer's prefetch, with one fetch of overshoot each
    named: dict[str, bool] = field(default_factory=dict)

    @property
    def producers_queue_bytes(self) -> int:
        return self.producer_queue_kbytes * 1024

    @property
    def records_overhead_bytes(self) -> int:
        """What the queue_size records in flight cost librdkafka beyond their keys and values."""
        return self.queue_size * RECORD_OVERHEAD_BYTES


def queue_size_for(round_trip_s: float | None) -> int:
    """The records in flight across every producer for a destination `round_trip_s` away (None: not measured)."""
    if is_near(round_trip_s):
        return LOOPBACK_QUEUE_SIZE
    seconds = UNMEASURED_ROUND_TRIP_S if round_trip_s is None else round_trip_s
    wanted = math.ceil(QUEUE_RATE * seconds * QUEUE_ROUND_TRIPS)
    return max(LOOPBACK_QUEUE_SIZE, min(MAX_QUEUE_SIZE, wanted))


def consumer_prefetch_bytes(consumer: dict[str, str]) -> int:
    """A source consumer's prefetch bound in bytes: queued.max.messages.kbytes, overshot by at most one fetch
    response (fetch.max.bytes over all of a broker's partitions: at width one response holds many partitions')."""
    kbytes = int(consumer.get("queued.max.messages.kbytes", CONSUMER_DEFAULTS["queued.max.messages.kbytes"]))
    fetch = int(consumer.get("fetch.max.bytes", WAN_FETCH_MAX_BYTES))  # not decided yet: the larger
    return kbytes * 1024 + fetch


def inflight_sizes(round_trip_s: float | None, budget_bytes: int, queue_size: int | None,
                   producer: dict[str, str], consumers: list[dict[str, str]], producers: int) -> InflightSizes:
    """The in-flight sizes for a destination `round_trip_s` away within `budget_bytes`.

    `queue_size`: the configured one (None: sized here); `producer`: the mirrored records' producers' settings
    (a queue.buffering.max.kbytes there is kept); `consumers`: each source consumer's settings as it will be
    made (its queued.max.messages.kbytes and fetch size are counted, not changed); `producers`: how many
    producers share the rest of the budget (each gets its own queue.buffering.max.kbytes)."""
    named = {"queue.size": queue_size is not None,
             "queue.buffering.max.kbytes": "queue.buffering.max.kbytes" in producer}
    consumer_bytes = sum(consumer_prefetch_bytes(c) for c in consumers)
    producers = max(1, producers)
    left = budget_bytes - consumer_bytes  # for the producers: their records' overhead, then their bytes
    if queue_size is None:
        # The records' overhead comes first: fewer records in flight, never fewer than near the destination,
        # when the budget cannot hold the round trip's and each producer's floor of bytes besides.
        fits = (left - producers * MIN_PRODUCER_QUEUE_BYTES) // RECORD_OVERHEAD_BYTES
        queue_size = max(LOOPBACK_QUEUE_SIZE, min(queue_size_for(round_trip_s), fits))
    if named["queue.buffering.max.kbytes"]:
        kbytes = int(producer["queue.buffering.max.kbytes"])
    else:
        share = (left - queue_size * RECORD_OVERHEAD_BYTES) // producers
        kbytes = max(MIN_PRODUCER_QUEUE_BYTES, share) // 1024
    return InflightSizes(
        round_trip_s=round_trip_s, budget_bytes=budget_bytes, queue_size=queue_size,
        producer_queue_kbytes=kbytes, consumer_queue_bytes=consumer_bytes, named=named,
    )


def producer_queue_kbytes_for(share_kbytes: int, partitions: int | None, batch_bytes: int) -> int:
    """A producer's queue.buffering.max.kbytes: its share of the budget (`share_kbytes`), at most BATCHES_PER_PARTITION
    batches of `batch_bytes` for each of the `partitions` it writes to (None or 0: not counted, the share), never
    under MIN_PRODUCER_QUEUE_BYTES unless the share is."""
    if not partitions:
        return share_kbytes
    held = max(MIN_PRODUCER_QUEUE_BYTES, BATCHES_PER_PARTITION * partitions * batch_bytes) // 1024
    return min(share_kbytes, held)


def within_budget(sizes: InflightSizes, producers: int) -> bool:
    """Whether what these sizes allow in flight fits the budget: the consumers' prefetch, the producers' bytes and
    their records' overhead (not when named settings, or a budget smaller than the prefetch plus each producer's
    floor and the loopback queue's overhead, exceed it)."""
    held = sizes.consumer_queue_bytes + producers * sizes.producers_queue_bytes + sizes.records_overhead_bytes
    return held <= sizes.budget_bytes
