"""The mirrored records' producers over their life: made with what the sizing says (engine/producer_sizing.py), their
bytes exported (engine/inflight.py export_producer_bytes), and made again when the destination topics' limits
(fit_batches) or the partitions found (fit_partitions) outgrow what they were made with.

At-least-once they are the worker's shared producers, a list refilled in place (the streams, the producer set and
the commits hold that list); exactly-once each source's one transactional producer, whose settings its
StreamTransaction keeps. Either way a producer is replaced only once everything it holds was delivered, so no record
is lost or reordered."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from mirror_worker.clients import factory
from mirror_worker.clients.callbacks import ClientSettings
from mirror_worker.clients.health import statistics_interval_ms
from mirror_worker.config.model import MirrorConfig
from mirror_worker.engine.inflight import export_producer_bytes
from mirror_worker.engine.producer_sizing import ProducerSizing
from mirror_worker.engine.run_state import RunState
from mirror_worker.metrics import MirrorMetrics
from mirror_worker.policy.routing import Router

if TYPE_CHECKING:
    from mirror_worker.engine.source_stream import SourceStream


class MirroredProducers:
    """`flush`: at-least-once, every shared producer's records delivered (True when they were); `commit_all`:
    exactly-once, every partition's transaction committed; `rewind`: a partition whose transaction a replacement
    aborted, sent again from its last commit (the worker's commit cycle and assignment, built after this)."""

    def __init__(self, config: MirrorConfig, sizing: ProducerSizing, router: Router, streams: list[SourceStream],
                 shared: list[Producer], clients: ClientSettings, metrics: MirrorMetrics, label: dict,
                 state: RunState, flush: Callable[[], bool], commit_all: Callable[[], object],
                 rewind: Callable[[SourceStream, tuple[str, int], str], None]) -> None:
        self.config = config
        self.sizing = sizing
        self.router = router
        self.streams = streams
        self.shared = shared
        self.clients = clients
        self.metrics = metrics
        self.label = label
        self.state = state
        self.flush = flush
        self.commit_all = commit_all
        self.rewind = rewind

    def settings(self, settings: dict, width: int | None = None) -> dict:
        """A producer's settings; `width`: the partitions it writes to, for its statistics interval and, a mirrored
        records' producer (`settings` is the mirror's producer settings), its bytes (default: every stream's, as
        counted at start; 0 when not counted). The mirrored records' producers also get the fitted batch.size and
        message.max.bytes; the worker's other producers (heartbeats) none of it."""
        if width is None:
            width = _counted(self.streams)
        fitted = self.sizing.fitted(self.partitions(counted=width)) if settings is self.config.producer else None
        if self.config.metrics_port is not None:  # what they see of the destination (clients/health.py)
            settings = {"statistics.interval.ms": statistics_interval_ms(width), **settings}
        return self.clients.producer(settings, fitted)

    def open(self) -> None:
        """Once the streams are open (exactly-once each made its producer): at-least-once the shared producers, whose
        bytes the partitions the streams counted at start bound; then every producer's bytes exported."""
        if not self.config.exactly_once:
            for _ in range(self.config.num_producers):
                self.shared.append(factory.producer(self.settings(self.config.producer)))
        self.export()

    def export(self) -> None:
        """The producers' bytes as made, bounded by the partitions they write to (ProducerSizing.made)."""
        counts = self._per_producer()
        export_producer_bytes(self.metrics, self.label, self.sizing.made(counts), max(counts, default=0))

    def fit_batches(self, limits) -> None:
        """Refit the producers to the destination topics' limits (ProducerSizing.refit) and replace them if anything
        changed. Also reached from a rebalance callback (TopicManagement.follow_growth)."""
        if self.sizing.refit(limits):
            self._replace()

    def fit_partitions(self) -> None:
        """After a topic refresh: topics made or grown with more partitions than counted at start give the producers
        room for more bytes (ProducerSizing.outgrown), and they are replaced as for a refit. Only ever from the main
        loop (the refresh), never from a rebalance callback: exactly-once commits every transaction first."""
        if self.sizing.outgrown(self._per_producer()):
            self._replace()

    def partitions(self, stream: SourceStream | None = None, counted: int | None = None) -> int:
        """The partitions a mirrored records' producer writes to, which bound its bytes: `counted` at start (default:
        `stream`'s, exactly-once, else every stream's), or the destination partitions of their topics found since when
        more (topics made or grown later); 0 when not counted at start (the budget's share, whatever is found later)."""
        streams = self.streams if stream is None else [stream]
        if counted is None:
            counted = _counted(streams)
        if not counted:
            return 0
        remote, found = self.router.policy.remote_topic, self.router.destination_partitions
        return max(counted, sum(found.get(remote(topic), 0) for s in streams for topic in s.topics))

    def _per_producer(self) -> list[int]:
        """The partitions each mirrored records' producer writes to (exactly-once: one producer per stream)."""
        if self.config.exactly_once:
            return [self.partitions(stream) for stream in self.streams]
        return [self.partitions()]

    def _replace(self) -> None:
        """Make the producers again with what the sizing says now, once everything they hold was delivered (a flush,
        or exactly-once a commit of every partition's transaction): nothing lost or reordered."""
        if not self.config.exactly_once:
            if self.shared and self.flush():
                self.shared[:] = [factory.producer(self.settings(self.config.producer)) for _ in self.shared]
                self.export()
            return
        self.commit_all()
        if self.state.fatal is not None:
            return
        for stream in self.streams:
            stream.transactions.producer_settings.update(self.sizing.fitted(self.partitions(stream)))
            stream.transactions.reopen()  # aborts a transaction whose commit did not finish: re-sent below
            for key in sorted(stream.assigned):
                if stream.ledger.next_offsets.get(key, -1) > stream.ledger.committed.get(key, -1):
                    self.rewind(stream, key, "producer replaced before its transaction committed")
        self.export()


def _counted(streams: list[SourceStream]) -> int:
    """The partitions these streams counted at start (0: none counted)."""
    return sum(stream.width or 0 for stream in streams)
