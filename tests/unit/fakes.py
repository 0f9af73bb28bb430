"""In-memory fakes of confluent-kafka's Consumer, Producer, AdminClient pieces and PartitionTransactions.

Just enough behaviour for the worker core's unit tests: a consumer over per-partition logs, a producer
with a bounded queue (BufferError when full) whose deliveries happen on poll/flush, and error injection.
"""

from __future__ import annotations

from types import SimpleNamespace

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, TopicPartition

from mirror_worker.exactly_once.transactions import ProducerFenced, TransactionAborted
from mirror_worker.exceptions import MirrorError


class FakeError:
    def __init__(self, code: int = KafkaError._MSG_TIMED_OUT, text: str = "fake error", fatal: bool = False) -> None:
        self._code, self._text, self._fatal = code, text, fatal

    def code(self) -> int:
        return self._code

    def str(self) -> str:
        return self._text

    def name(self) -> str:
        return str(self._code)

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return False


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None = b"k", value: bytes | None = b"v",
                 headers: list | None = None, timestamp: int | None = 1_000, error: FakeError | None = None) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers, self._timestamp, self._error = key, value, headers, timestamp, error

    def topic(self): return self._topic
    def partition(self): return self._partition
    def offset(self): return self._offset
    def key(self): return self._key
    def value(self): return self._value
    def headers(self): return self._headers
    def timestamp(self): return (1, self._timestamp) if self._timestamp is not None else (TIMESTAMP_NOT_AVAILABLE, -1)
    def error(self): return self._error

    def __repr__(self) -> str:
        return f"{self._topic}[{self._partition}]@{self._offset}"


def records(topic: str, partition: int, offsets) -> list[FakeMessage]:
    return [FakeMessage(topic, partition, o, value=f"{topic}-{partition}-{o}".encode()) for o in offsets]


class FakeConsumer:
    """Consumes from `logs` ({(topic, partition): [FakeMessage]}, offsets = list index + `low`)."""

    def __init__(self, logs: dict | None = None, committed: dict | None = None, low: dict | None = None) -> None:
        self.logs = logs or {}
        self.low = low or {}
        self.group_offsets = dict(committed or {})  # (topic, partition) -> (offset, metadata)
        self.positions: dict = {}
        self.assignment: set = set()
        self.paused: set = set()
        self.commits: list[dict] = []
        self.seeks: list[tuple] = []
        self.assign_calls: list[str] = []

    def _assign(self, partitions) -> None:
        for tp in partitions:
            self.assignment.add((tp.topic, tp.partition))
            self.positions[(tp.topic, tp.partition)] = tp.offset

    def assign(self, partitions) -> None:
        self.assign_calls.append("assign")
        self.assignment = set()
        self._assign(partitions)

    def incremental_assign(self, partitions) -> None:
        self.assign_calls.append("incremental_assign")
        self._assign(partitions)

    def pause(self, partitions) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in partitions}

    def seek(self, tp) -> None:
        self.seeks.append(((tp.topic, tp.partition), tp.offset))
        self.positions[(tp.topic, tp.partition)] = tp.offset

    def position(self, partitions):
        return [TopicPartition(tp.topic, tp.partition, self.positions.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def commit(self, offsets=None, asynchronous=True) -> None:
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        for tp in offsets:
            self.group_offsets[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")

    def committed(self, partitions, timeout=None):
        out = []
        for tp in partitions:
            offset, metadata = self.group_offsets.get((tp.topic, tp.partition), (-1001, ""))
            out.append(TopicPartition(tp.topic, tp.partition, offset, metadata))
        return out

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        key = (tp.topic, tp.partition)
        low = self.low.get(key, 0)
        return low, low + len(self.logs.get(key, []))

    def consume(self, num_messages=1, timeout=-1) -> list:
        out = []
        for key in sorted(self.assignment):
            if key in self.paused:
                continue
            low = self.low.get(key, 0)
            log = self.logs.get(key, [])
            while len(out) < num_messages and low <= self.positions.get(key, low) < low + len(log):
                out.append(log[self.positions[key] - low])
                self.positions[key] += 1
        return out

    def poll(self, timeout=None):
        batch = self.consume(1)
        return batch[0] if batch else None

    def close(self) -> None:
        pass


class FakeProducer:
    """A bounded queue: produce() raises BufferError when `capacity` records are in flight.

    Deliveries happen on poll()/flush() unless `stalled` (destination down); a record for which
    `refuse(record)` is true is reported with an error (`refusal`) instead, to the record's own on_delivery if it
    was produced with one (the worker's RunDelivery), else to the producer's.
    """

    def __init__(self, capacity: int = 1000, on_delivery=None, transactional: bool = False) -> None:
        self.capacity = capacity
        self.transactional = transactional
        self.in_transaction: list[FakeMessage] = []  # delivered, visible only once the transaction commits
        self.on_delivery = on_delivery
        self.queue: list[FakeMessage] = []
        self.delivered: list[FakeMessage] = []
        self.stalled = False
        self.refuse = lambda record: False
        self.refusal = FakeError(KafkaError.MSG_SIZE_TOO_LARGE, "refused")
        self.produce_error: KafkaException | None = None

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, callback=None, timestamp=0,
                headers=None) -> None:
        # confluent-kafka's order (mirror_worker/clients/produce_positions.py): the hot path passes them by position.
        on_delivery = on_delivery or callback
        if self.produce_error is not None:
            raise self.produce_error
        if len(self.queue) >= self.capacity:
            raise BufferError("Local: Queue full")
        record = FakeMessage(topic, partition, -1, key, value, headers, timestamp)
        record.report = on_delivery  # as librdkafka keeps a per-message callback
        self.queue.append(record)

    def _deliver(self) -> None:
        if self.stalled:
            return
        for record in self.queue:
            if self.refuse(record):
                # As librdkafka reports a refused record: without its timestamp (measured, test_topic_sync.py).
                reported = FakeMessage(record.topic(), record.partition(), -1, record.key(), record.value(),
                                       record.headers(), timestamp=None)
                (record.report or self.on_delivery)(self.refusal, reported)
            else:
                (self.in_transaction if self.transactional else self.delivered).append(record)
        self.queue = []

    def poll(self, timeout=None) -> int:
        self._deliver()
        return 0

    def flush(self, timeout=None) -> int:
        self._deliver()
        return len(self.queue)

    def __len__(self) -> int:
        return len(self.queue)


class FakeTransactions:
    """StreamTransaction: one producer, positions on the 'destination', commits that abort (or are fenced)
    when told to."""

    def __init__(self, positions: dict | None = None, producer_factory=FakeProducer) -> None:
        self.expired: set = set()  # partitions whose position expired from the destination
        self.positions = dict(positions or {})  # key -> (offset, topic id)
        self.writers: dict = {}  # key -> the writer its position names ("" released)
        self.producer_factory = producer_factory
        self.producers: list = []
        self.abort_next = False
        self.fence_next = False
        self.fenced = False
        self.broken = False
        self.closed = False
        self.reopened = 0
        self.ended = 0  # transactions ended: committed, aborted or replaced (StreamTransaction.ended)
        self.commits: list[dict] = []  # the positions of each committed transaction
        self.aborts: list[str] = []
        self.opened: list = []

    def _producer(self):
        if not self.producers:
            self.producers.append(self.producer_factory())
        return self.producers[0]

    def open(self, keys):
        self._producer()
        self.opened.extend(keys)
        return {key: self.positions.get(key) for key in keys}

    def reopen(self) -> None:
        self.reopened += 1
        self.fenced = self.broken = False
        if self.producers:
            self.ended += 1
            self.producers[0].queue, self.producers[0].in_transaction = [], []

    def commit(self, positions: dict, released: set, timeout_s) -> dict:
        producer = self._producer()
        if self.fenced or self.fence_next:
            self.fence_next = False
            self.fenced = True
            raise ProducerFenced("fake: fenced")
        if self.abort_next:
            self.abort_next = False
            producer.queue, producer.in_transaction = [], []  # the aborted transaction's records are gone
            self.ended += 1
            raise TransactionAborted("fake: aborted")
        producer.flush()
        producer.delivered += producer.in_transaction
        producer.in_transaction = []
        self.commits.append(dict(positions))
        self.ended += 1
        for key, offset in positions.items():
            self.positions[key] = (offset, "")
            self.writers[key] = "" if key in released else "me"
        return dict(positions)

    def abort(self, reason: str = "aborted") -> None:
        if self.fenced:
            raise ProducerFenced("fake: fenced")
        self.aborts.append(reason)
        self.ended += 1
        if self.producers:
            self.producers[0].queue, self.producers[0].in_transaction = [], []

    def pending_commit(self):
        return None

    def unfinished(self) -> bool:
        return False

    def vanished(self, keys) -> set:
        """Of partitions without a position, those that had one (see StreamTransaction.vanished)."""
        return set(keys) & self.expired

    def keepalive_due(self, owned, interval_s: float) -> dict:
        return {}

    def forget(self, keys) -> None:
        pass

    def close_all(self) -> None:
        self.closed = True


class FakeTopicDescription:
    def __init__(self, topic_id: str) -> None:
        self.topic_id = topic_id


class FakeFuture:
    """A done admin future: its `value`, or a KafkaException of `error` (a KafkaError code)."""

    def __init__(self, value=None, error: int | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout=None):
        if self.error is not None:
            raise KafkaException(KafkaError(self.error))
        return self.value


class FakeGroupDescription:
    def __init__(self, members: int) -> None:
        from confluent_kafka import ConsumerGroupState

        self.members = [object()] * members
        self.state = ConsumerGroupState.STABLE if members else ConsumerGroupState.EMPTY


class FakeAdmin:
    """AdminClient.describe_topics: every topic has the id in `topic_ids` (default 'id-<topic>');
    describe_consumer_groups: `group_members` members per group (none by default); list_offsets: the bounds
    `watermarks(tp)` gives (a FakeConsumer's get_watermark_offsets), one call per request."""

    def __init__(self, topic_ids: dict | None = None, group_members: dict | None = None, watermarks=None) -> None:
        self.topic_ids = topic_ids or {}
        self.group_members = group_members if group_members is not None else {}
        self.watermarks = watermarks
        self.list_offsets_calls = 0

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        from confluent_kafka.admin import OffsetSpec
        self.list_offsets_calls += 1
        out = {}
        for tp, spec in requests.items():
            low, high = self.watermarks(tp)
            out[tp] = FakeFuture(TopicPartition(tp.topic, tp.partition, low if spec == OffsetSpec.earliest() else high))
        return out

    def describe_topics(self, topics, request_timeout=None):
        return {t: FakeFuture(FakeTopicDescription(self.topic_ids.get(t, f"id-{t}"))) for t in topics.topic_names}

    def describe_consumer_groups(self, groups, request_timeout=None):
        return {g: FakeFuture(FakeGroupDescription(self.group_members.get(g, 0))) for g in groups}

    def list_topics(self, topic=None, timeout=None):
        return SimpleNamespace(topics={})  # no topic: no failover mark (failover_mark.py)

    def close_coordinator_process(self) -> None:  # an IsolatingAdmin's (factory.group_admin_client)
        pass


class FakeDestination:
    """DestinationTopics: topics exist with the source's partitions; no size limit unless set."""

    def __init__(self, max_bytes: dict | None = None) -> None:
        self.limits = max_bytes or {}

    def ensure(self, mapping, configs=None):
        return {topic: info.partitions for topic, info in mapping.items()}

    def ensure_internal(self, topics):
        pass

    def max_message_bytes(self, topics):
        return {t: self.limits[t] for t in topics if t in self.limits}


class FakeClock:
    """Monotonic time that moves `step` seconds at each reading (deadlines end, no sleeping)."""

    def __init__(self, step: float = 0.05) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def make_worker(logs: dict, *, committed: dict | None = None, low: dict | None = None, capacity: int = 1000,
                exactly_once: bool = False, incremental: bool = False,
                positions: dict | None = None, **fields):
    """A MirrorWorker over one fake source ('src') and fake producers, assembled without start().

    Returns (worker, stream, consumer, producer); exactly-once, `producer` is None (see stream.transactions).
    """
    from mirror_worker.config.model import build_mirror_config
    from mirror_worker.engine.source_stream import SourceStream
    from mirror_worker.engine.worker import MirrorWorker
    from mirror_worker.metrics import MirrorMetrics

    topics = sorted({t for t, _ in logs})
    config = build_mirror_config({
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "|".join(topics), "group_id": "g",
        "num_producers": 1, "config_sync_interval_ms": 0, "prefix": "dst.",
        **({"delivery": "exactly-once"} if exactly_once else {}), **fields,
    })
    worker = MirrorWorker(config, MirrorMetrics("m"), clock=FakeClock())
    consumer = FakeConsumer(logs, committed, low)
    stream = SourceStream("src", consumer, "src-cluster", False, producers=worker.producers,
                          reset_policy="earliest", incremental_assignment=incremental,
                          admin=FakeAdmin(watermarks=consumer.get_watermark_offsets))
    producer = None
    if exactly_once:
        stream.transactions = FakeTransactions(positions, lambda: FakeProducer(capacity, worker.client_errors.delivery_error, transactional=True))
        stream.producers = stream.transactions.producers
    else:
        producer = FakeProducer(capacity, worker.client_errors.delivery_error)
        worker.producers.append(producer)
    worker.streams.append(stream)
    worker.assemble(FakeAdmin(), FakeDestination())
    from mirror_worker.topics.admin import TopicInfo

    partitions = {t: 1 + max(p for tp, p in logs if tp == t) for t in topics}
    stream.topics = {t: TopicInfo(t, partitions[t], 1) for t in topics}  # subscribed (refresh is not driven here)
    return worker, stream, consumer, producer


def scheduled_calls(worker, method: str, calls: int = 3) -> tuple[float, list[float]]:
    """Run `worker` until its loop has called `worker.housekeeping.<method>` `calls` times (the method replaced by a
    recorder); (delay of the first call after the start, gaps between calls), in the fake clock's seconds."""
    called_at: list[float] = []

    def record() -> None:
        called_at.append(worker.clock.now)
        if len(called_at) == calls:
            worker.stop_event.set()

    setattr(worker.housekeeping, method, record)
    started = worker.clock.now
    worker.run()
    return called_at[0] - started, [later - earlier for earlier, later in zip(called_at, called_at[1:])]


def assign(worker, stream, *keys) -> None:
    worker.assignment.on_assign(stream, [TopicPartition(t, p) for t, p in keys])


class FakeDestinationPartitions:
    """resume_search.DestinationReader over in-memory partitions: {(topic, partition): [(offset, header)]}
    in offset order (gaps allowed); `low` per partition (default: the first offset, else 0); the end is one
    past the last offset unless `ends` says otherwise. Records every read's start in `reads`."""

    def __init__(self, partitions: dict, low: dict | None = None, ends: dict | None = None) -> None:
        self.partitions = partitions
        self.low = low or {}
        self.ends = ends or {}
        self.reads: list[tuple[str, int, int, int]] = []

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        records = self.partitions.get((topic, partition), [])
        low = self.low.get((topic, partition), records[0][0] if records else 0)
        end = self.ends.get((topic, partition), records[-1][0] + 1 if records else low)
        return low, end

    def records(self, topic: str, partition: int, start: int, end: int):
        self.reads.append((topic, partition, start, end))
        return [(o, h) for o, h in self.partitions.get((topic, partition), []) if start <= o < end]


class FakeLogConsumer:
    """A read_committed consumer over logs with explicit offsets ({(topic, partition): [FakeMessage]}, gaps
    allowed): after the last record of an assigned partition, one _PARTITION_EOF event."""

    def __init__(self, logs: dict) -> None:
        self.logs = logs
        self.assigned: tuple | None = None
        self.position = 0
        self.eof_sent = False
        self.unassigned = 0

    def assign(self, partitions) -> None:
        (tp,) = partitions
        self.assigned, self.position, self.eof_sent = (tp.topic, tp.partition), tp.offset, False

    def unassign(self) -> None:
        self.assigned = None
        self.unassigned += 1

    def consume(self, num_messages=1, timeout=-1) -> list:
        if self.assigned is None:
            return []
        log = self.logs.get(self.assigned, [])
        out = [m for m in log if m.offset() >= self.position][:num_messages]
        if out:
            self.position = out[-1].offset() + 1
        elif not self.eof_sent:
            self.eof_sent = True
            out = [FakeMessage(*self.assigned, self.position, error=FakeError(KafkaError._PARTITION_EOF, "eof"))]
        return out

    def close(self) -> None:
        pass


class FakeOffsetsAdmin:
    """AdminClient.list_offsets: `bounds` {(topic, partition): (earliest, latest)}; records the isolation level."""

    def __init__(self, bounds: dict) -> None:
        self.bounds = bounds
        self.isolation_levels: list = []

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        from confluent_kafka.admin import OffsetSpec
        self.isolation_levels.append(isolation_level)
        out = {}
        for tp, spec in requests.items():
            earliest, latest = self.bounds[(tp.topic, tp.partition)]
            offset = earliest if spec == OffsetSpec.earliest() else latest
            out[tp] = FakeFuture(TopicPartition(tp.topic, tp.partition, offset))
        return out


class UnreadableHeadersMessage(FakeMessage):
    """A record with a header name that is not UTF-8, as confluent-kafka hands it over: `headers()` raises
    SystemError (from a UnicodeDecodeError); called again, the real client returns a list holding a NULL tuple
    (touching it crashes the interpreter), so here a second call fails the test."""

    NAME = b"\xff\xfetrace"

    def headers(self):
        if getattr(self, "_read", False):
            raise AssertionError(f"{self!r}: headers() called twice")
        self._read = True
        try:
            self.NAME.decode()
        except UnicodeDecodeError as exc:
            raise SystemError("<method 'headers' of 'confluent_kafka.cimpl.Message' objects> returned a result "
                              "with an exception set") from exc
