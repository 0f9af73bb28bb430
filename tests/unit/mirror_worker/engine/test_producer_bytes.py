"""The mirrored records' producers' bytes follow the partitions they write to (stop 67, engine/mirrored_producers.py
partitions and fit_partitions; engine/producer_sizing.py made, outgrown): three batches a partition, as counted at
start, and room for topics found later."""

from __future__ import annotations

from mirror_worker.clients import factory
from mirror_worker.config.inflight import BATCHES_PER_PARTITION, MIB, MIN_PRODUCER_QUEUE_BYTES, inflight_sizes
from mirror_worker.topics.admin import TopicInfo
from tests.unit.fakes import FakeProducer, make_worker, records


def _worker(counted_at_start: int | None):
    worker, stream, _, _ = make_worker({("t", 0): records("t", 0, range(3))})
    worker.resize(inflight_sizes(0.1, 128 * MIB, None, {}, [], 1))  # 100 ms away, no prefetch: a share of ~94 MiB
    stream.width = counted_at_start
    stream.topics = {"t": TopicInfo("t", 2, 1)}
    worker.router.set_destination_partitions("dst.t", 2)
    worker.mirrored_producers.export()  # as start() does once the producers are made
    return worker, stream


def _limit(worker) -> float:
    return worker.metrics.inflight_limit.labels(limit="producer_queue_bytes", mirror="m")._value.get()


def _found(worker, stream, topic: str, partitions: int) -> None:
    """A topic found by a refresh: its destination made (the router counts it), then subscribed."""
    worker.router.set_destination_partitions(f"dst.{topic}", partitions)
    stream.topics = {**stream.topics, topic: TopicInfo(topic, partitions, 1)}


def test_topics_found_with_more_partitions_than_counted_at_start_remake_the_producers_with_room_for_them(
        monkeypatch):
    worker, stream = _worker(2)
    first = worker.producers[0]
    share, batch = worker.sizing.producer_queue_kbytes, worker.sizing.batch_bytes
    assert worker.sizing.made_kbytes == [MIN_PRODUCER_QUEUE_BYTES // 1024]
    assert _limit(worker) == MIN_PRODUCER_QUEUE_BYTES
    made = []
    monkeypatch.setattr(factory, "producer", lambda settings: made.append(settings) or FakeProducer())
    worker.mirrored_producers.fit_partitions()  # nothing new: the producers stay
    assert made == []
    _found(worker, stream, "u", 8)  # 10 partitions now, 30 batches
    # The refit alone (which follow_growth reaches from a rebalance callback) never replaces them for partitions.
    worker.mirrored_producers.fit_batches(worker.topics.max_bytes.values())
    assert made == []
    worker.mirrored_producers.fit_partitions()
    wanted = BATCHES_PER_PARTITION * 10 * batch // 1024
    assert wanted < share
    assert [int(s["queue.buffering.max.kbytes"]) for s in made] == [wanted]
    assert len(worker.producers) == 1 and worker.producers[0] is not first  # flushed, then made again
    assert worker.sizing.made_kbytes == [wanted] and _limit(worker) == wanted * 1024
    # A thousand partitions more: the budget's share binds. Fewer partitions again never remakes them.
    _found(worker, stream, "v", 1000)
    worker.mirrored_producers.fit_partitions()
    assert int(made[-1]["queue.buffering.max.kbytes"]) == share and len(made) == 2
    stream.topics.pop("v")
    worker.mirrored_producers.fit_partitions()
    assert len(made) == 2


def test_partitions_not_counted_at_start_leave_the_producers_the_budgets_share(monkeypatch):
    """A far source without metrics is not counted at start (one metadata request across the WAN): its producers
    keep the share, and topics found later never shrink it by remaking them."""
    worker, stream = _worker(None)
    assert worker.sizing.made_kbytes == [worker.sizing.producer_queue_kbytes]
    made = []
    monkeypatch.setattr(factory, "producer", lambda settings: made.append(settings) or FakeProducer())
    _found(worker, stream, "u", 4)
    worker.mirrored_producers.fit_partitions()
    assert made == []


def test_exactly_once_producers_follow_their_own_streams_partitions(monkeypatch):
    """Exactly-once has a transactional producer per source stream: its bound counts that stream's topics only, and
    a commit of every transaction comes before it is made again (fit_partitions runs in the main loop)."""
    worker, stream, _, _ = make_worker({("t", 0): records("t", 0, range(3))}, exactly_once=True)
    worker.resize(inflight_sizes(0.1, 128 * MIB, None, {}, [], 1))
    stream.width = 2
    worker.router.set_destination_partitions("dst.t", 2)
    worker.router.set_destination_partitions("dst.other", 500)  # another stream's topic: not this producer's
    worker.mirrored_producers.export()
    assert worker.sizing.made_kbytes == [MIN_PRODUCER_QUEUE_BYTES // 1024]
    reopened = []
    stream.transactions.producer_settings = {}  # StreamTransaction's, which its next producer is made with
    stream.transactions.reopen = lambda: reopened.append(dict(stream.transactions.producer_settings))
    worker.mirrored_producers.fit_partitions()
    assert reopened == []
    _found(worker, stream, "u", 8)
    worker.mirrored_producers.fit_partitions()
    assert [int(s["queue.buffering.max.kbytes"]) for s in reopened] == \
        [BATCHES_PER_PARTITION * 10 * worker.sizing.batch_bytes // 1024]
