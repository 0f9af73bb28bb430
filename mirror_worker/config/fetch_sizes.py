"""How much a source consumer fetches at once, from the source's round trip measured at start
(clients/round_trip.py) and, for a source across a WAN, the size of its records sampled at start
(clients/record_sizes.py). Pure: engine/streams.py applies it, config/librdkafka.py's consumer_settings leaves
these keys out of a mirror source's defaults so that the sizes chosen here apply unless named.
"""

from __future__ import annotations

import math

# A fetch carries at most max.partition.fetch.bytes of each partition, and one fetch per broker is in flight:
# with librdkafka's 1 MiB, a source 50 ms away held the copy at 81 % of loopback (6 partitions, 1 KiB records,
# bench/wan.py); with 4 MiB, 105 %. On loopback the larger fetches buy nothing and cost memory: the worker's peak
# RSS copying 2M x 100 B was 308-311 MiB with 4 MiB, 205-207 with 1 MiB (2026-11-29, /tmp probe of stop 52,
# docs/benchmarks/wan.md). So the size follows the round trip measured at start (clients/round_trip.py).
LOOPBACK_PARTITION_FETCH_BYTES = 1048576  # librdkafka's own default
WAN_PARTITION_FETCH_BYTES = 4194304
# A fetch response carries up to fetch.max.bytes over all of a broker's partitions, and librdkafka keeps a
# response's buffer until the last of its records is consumed: at width (5,000 partitions on one broker) the
# prefetch is a handful of whole responses. A consumer alone reading 1M x 100 B from 5,000 partitions on loopback
# peaked at 164-219 MiB with 16 MiB responses, 104-121 with 4 MiB, at the same rate (2026-11-30, /tmp probe, four
# or five runs each; docs/benchmarks/width.md). So a near source of many partitions gets 4 MiB responses.
# Not one of a few partitions: a response that cuts its partitions' data short costs CPU while the destination is
# slow. With the destination 50 ms away (1M x 1 KiB, bench.wan), 6 partitions of 1 MiB fetches under a 4 MiB cap
# took 20.8-21.3 CPU-s at 44,000 msgs/s, against 7.3-7.6 CPU-s at 66,000-69,000 with the cap above 6 MiB or
# 512-KiB fetches under it; 24 partitions 12.9 against 8.7 (2026-11-30, stop 59; docs/benchmarks/wan.md). A source
# whose partitions' fetches all fit in WAN_FETCH_MAX_BYTES keeps that: its responses are never cut short.
LOOPBACK_FETCH_MAX_BYTES = 4194304
WAN_FETCH_MAX_BYTES = 16777216
# A round trip this long is a WAN. Loopback and a datacenter answer a metadata request in ~1 ms; cross-zone
# links a few; the shortest of three samples keeps a loaded machine's slow moment from looking like a WAN.
WAN_ROUND_TRIP_S = 0.015


# librdkafka fetches a partition again while its prefetch queue holds fewer records than queued.min.messages
# (default 100,000 per partition). Near the source a fetch returns within a millisecond or two, and 5,000 records
# of 100 B are ~12 ms of the loop's work, so more only holds memory: copying 2M x 100 B on loopback, peak RSS 201
# MiB with 100,000 and 158 MiB with 5,000 (1 partition: 141 and 100), at the same rate and CPU (2026-11-30,
# bench.compare worker-base beside worker). A partition keeps two round trips of the whole copy rate (it may be the
# only one), at a WAN source too: 30,000 at 50 ms took the peak RSS of 10M x 100 B from a source 50 ms away from 323
# to 283 MiB at the same rate (bench.wan --rss-records, 2026-11-30, bench/results/wan-rss/); at 1 KiB the prefetch's
# bytes (queued.max.messages.kbytes) bind first. An unmeasured source keeps librdkafka's default.
LOOPBACK_QUEUED_MIN_MESSAGES = 5000
LIBRDKAFKA_QUEUED_MIN_MESSAGES = 100_000
PREFETCH_RATE = 300_000  # records/s: about the loop's copy rate of 100 B records on the bench


def queued_min_messages_for(round_trip_s: float) -> int:
    """A source's queued.min.messages: two round trips of PREFETCH_RATE, at least 5,000, at most librdkafka's
    default (100,000: from about 167 ms on)."""
    wanted = math.ceil(2 * PREFETCH_RATE * round_trip_s)
    return min(LIBRDKAFKA_QUEUED_MIN_MESSAGES, max(LOOPBACK_QUEUED_MIN_MESSAGES, wanted))


def is_near(round_trip_s: float | None) -> bool:
    """A cluster measured closer than a WAN (None: not measured, taken as a WAN)."""
    return round_trip_s is not None and round_trip_s < WAN_ROUND_TRIP_S


# A far source's response follows its records' size too. librdkafka holds a response's buffer until the last of its
# records is consumed, and each record it hands over costs a few hundred bytes of its own besides: 16 MiB of 100 B
# records is ~140,000 records, far more than a round trip of the copy needs (~15,000 at 50 ms), and a source 50 ms
# away then held the worker's peak RSS at 268-283 MiB over 1M-10M x 100 B; 8 MiB responses at 183-195, at the same
# rate (bench.wan --rss-records, 2026-11-30, stops 57 and 61; docs/benchmarks/wan.md). So when the records are
# small, a response carries RESPONSE_RATE records/s over one round trip (4x PREFETCH_RATE: room for a machine that
# copies faster and for records larger than the sample), at least LOOPBACK_FETCH_MAX_BYTES, at most
# WAN_FETCH_MAX_BYTES (1 KiB records at 50 ms: the cap, as before). Unsampled (an empty topic, no answer in time):
# the cap.
RESPONSE_RATE = 4 * PREFETCH_RATE
# ...and never more than RESPONSE_RECORDS records: one response per round trip of 200 ms still carries 340,000
# records/s, above the loop's copy rate. Without it a source 200 ms away got the 16 MiB cap at 100 B (~135,000
# records a response) and held the worker at 275.6 MiB of peak RSS copying 1M x 100 B; 8 MiB responses (named)
# at 194.7 MiB, copying at 281,000 msgs/s against 320,000, 95 % of loopback's (bench.wan, 2026-12-01, stop 65;
# docs/benchmarks/wan.md). Below ~57 ms the rate rule stays the smaller; 1 KiB records keep the cap.
RESPONSE_RECORDS = 68_000


def wan_fetch_max_bytes(round_trip_s: float | None, record_bytes: float | None) -> int:
    """A far source's fetch.max.bytes for records of `record_bytes` each on the wire (None: not sampled)."""
    if round_trip_s is None or not record_bytes:
        return WAN_FETCH_MAX_BYTES
    wanted = math.ceil(min(RESPONSE_RATE * round_trip_s, RESPONSE_RECORDS) * record_bytes)
    return min(WAN_FETCH_MAX_BYTES, max(LOOPBACK_FETCH_MAX_BYTES, wanted))


def message_max_bytes(settings: dict[str, str]) -> int:
    """A consumer's message.max.bytes, which librdkafka refuses a fetch.max.bytes under (0: not named, or not a
    number, which librdkafka's own check then names)."""
    value = str(settings.get("message.max.bytes", "0"))
    return int(value) if value.isdigit() else 0


def fetch_sizes_for(round_trip_s: float | None, settings: dict[str, str],
                    partitions: int | None = None, record_bytes: float | None = None) -> dict[str, str]:
    """The source consumer's max.partition.fetch.bytes, fetch.max.bytes and queued.min.messages for a cluster
    `round_trip_s` away (None: not measured, taken as a WAN: the larger sizes never slow a copy) whose mirrored
    `partitions` were counted at start (None, or 0 before its topics exist: taken as many) and whose records were
    sampled at `record_bytes` each (None: not sampled; a far source's responses follow it, wan_fetch_max_bytes),
    each unless its settings name it (parsed with `sized_by_round_trip`, which leaves them out)."""
    wan = not is_near(round_trip_s)
    few = bool(partitions) and partitions * LOOPBACK_PARTITION_FETCH_BYTES <= WAN_FETCH_MAX_BYTES
    response = wan_fetch_max_bytes(round_trip_s, record_bytes) if wan else \
        WAN_FETCH_MAX_BYTES if few else LOOPBACK_FETCH_MAX_BYTES
    response = max(response, message_max_bytes(settings))
    sizes = {"max.partition.fetch.bytes": str(WAN_PARTITION_FETCH_BYTES if wan else LOOPBACK_PARTITION_FETCH_BYTES),
             "fetch.max.bytes": str(response)}
    if round_trip_s is not None:
        sizes["queued.min.messages"] = str(queued_min_messages_for(round_trip_s))
    return {key: value for key, value in sizes.items() if key not in settings}
