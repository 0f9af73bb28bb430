"""MirroredProducers alone (engine/mirrored_producers.py), over in-memory collaborators: the producers are replaced
only once what they hold was delivered, and the bound's log names the partitions of the producer it bounds."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from mirror_worker.clients import factory
from mirror_worker.config.inflight import BATCHES_PER_PARTITION, MIB, inflight_sizes
from mirror_worker.config.model import build_mirror_config
from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.engine.mirrored_producers import MirroredProducers
from mirror_worker.engine.producer_sizing import ProducerSizing
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.routing import Router
from mirror_worker.topics.admin import TopicInfo


class _Clients:
    """ClientSettings.producer: the settings with the fitted ones on top."""

    def producer(self, settings: dict, fitted: dict | None = None) -> dict:
        return {**settings, **(fitted or {})}


def _config(exactly_once: bool, sources: int = 1):
    return build_mirror_config({
        "name": "m", "sources": [{"name": f"s{i}", "consumer": {"bootstrap.servers": "a:1"}} for i in range(sources)],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": ".*", "group_id": "g", "num_producers": 1,
        "prefix": "dst.", **({"delivery": "exactly-once"} if exactly_once else {}),
    })


def _stream(alias: str, width: int, topics: dict[str, int]):
    return SimpleNamespace(alias=alias, width=width, topics={t: TopicInfo(t, n, 1) for t, n in topics.items()},
                           assigned=set(), ledger=OffsetLedger(), transactions=None)


def _producers(config, streams, *, flush=lambda: True, commit_all=lambda: True, state: RunState | None = None):
    sizing = ProducerSizing(config.producer, 10_000, {"mirror": "m"})
    sizing.resize(inflight_sizes(0.1, 128 * MIB, None, {}, [], 1))  # 100 ms away, no prefetch: a share of ~94 MiB
    router = Router(config.naming_policy(), config.preserve_partitions, config.preserve_order, 1)
    for stream in streams:
        for topic, info in stream.topics.items():
            router.set_destination_partitions(f"dst.{topic}", info.partitions)
    shared: list = []
    state = state or RunState(5.0, lambda: 0.0)
    rewound: list = []
    producers = MirroredProducers(config, sizing, router, streams, shared, _Clients(), MirrorMetrics("m"),
                                  {"mirror": "m"}, state, flush=flush, commit_all=commit_all,
                                  rewind=lambda stream, key, reason: rewound.append((stream.alias, key)))
    return producers, shared, state, rewound


def _grow(producers: MirroredProducers, stream, topic: str, partitions: int) -> None:
    producers.router.set_destination_partitions(f"dst.{topic}", partitions)
    stream.topics[topic] = TopicInfo(topic, partitions, 1)


def test_producers_whose_records_were_not_all_delivered_are_kept(monkeypatch):
    """A flush that leaves records undelivered (a destination that does not answer in time) keeps the producers that
    hold them: replacing them would drop what they hold. The next refresh tries again."""
    made = []
    monkeypatch.setattr(factory, "producer", lambda settings: made.append(settings) or object())
    delivered = [False]
    stream = _stream("s0", 2, {"t": 2})
    producers, shared, _, _ = _producers(_config(False), [stream], flush=lambda: delivered[0])
    producers.open()
    first = list(shared)
    _grow(producers, stream, "u", 8)
    producers.fit_partitions()
    assert shared == first and len(made) == 1
    delivered[0] = True
    producers.fit_partitions()
    assert len(shared) == 1 and shared[0] is not first[0] and len(made) == 2
    assert int(made[-1]["queue.buffering.max.kbytes"]) == \
        BATCHES_PER_PARTITION * 10 * producers.sizing.batch_bytes // 1024


def test_exactly_once_a_commit_that_failed_the_run_reopens_no_producer(monkeypatch):
    """Exactly-once the transactions commit before a producer is made again; a commit that failed the run (fenced)
    leaves every producer as it is, and nothing is rewound."""
    stream = _stream("s0", 2, {"t": 2})
    stream.transactions = SimpleNamespace(producer_settings={}, reopened=0)
    stream.transactions.reopen = lambda: setattr(stream.transactions, "reopened", stream.transactions.reopened + 1)
    state = RunState(5.0, lambda: 0.0)
    producers, _, _, rewound = _producers(_config(True), [stream], commit_all=lambda: state.fail("fenced"), state=state)
    producers.export()
    _grow(producers, stream, "u", 8)
    producers.fit_partitions()
    assert state.fatal == "fenced" and stream.transactions.reopened == 0 and rewound == []


def test_exactly_once_partitions_not_yet_committed_are_rewound_after_a_reopen():
    """A reopen aborts a transaction whose commit did not finish: its partitions are sent again from their last
    commit, the ones committed are not."""
    stream = _stream("s0", 2, {"t": 2})
    stream.transactions = SimpleNamespace(producer_settings={}, reopen=lambda: None)
    stream.assigned = {("t", 0), ("t", 1)}
    stream.ledger.next_offsets.update({("t", 0): 5, ("t", 1): 7})
    stream.ledger.committed.update({("t", 0): 5, ("t", 1): 3})
    producers, _, _, rewound = _producers(_config(True), [stream])
    producers.export()
    _grow(producers, stream, "u", 8)
    producers.fit_partitions()
    assert rewound == [("s0", ("t", 1))]
    assert int(stream.transactions.producer_settings["queue.buffering.max.kbytes"]) == \
        BATCHES_PER_PARTITION * 10 * producers.sizing.batch_bytes // 1024


def test_the_bound_logged_names_the_partitions_of_the_producer_it_bounds(caplog):
    """Exactly-once each source's producer writes to its own stream's partitions: the log gives the largest
    producer's bytes with that producer's partitions, not every stream's summed."""
    streams = [_stream("s0", 2, {"t": 2}), _stream("s1", 4, {"v": 4})]
    producers, _, _, _ = _producers(_config(True, sources=2), streams)
    with caplog.at_level(logging.INFO, logger="mirror_worker"):
        producers.export()
    [record] = [r for r in caplog.records if r.getMessage() == "producer bytes bounded by its partitions' batches"]
    assert record.partitions == 4
    assert producers.sizing.made_kbytes[0] <= producers.sizing.made_kbytes[1] == record.producer_queue_kbytes
