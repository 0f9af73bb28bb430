"""One source cluster as the worker holds it: its consumer, offset ledger, topics and per-partition state.

The state the hot path and the parts (worker_*.py) share per source; positions move only through its ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from mirror_worker.engine.ledger import OffsetLedger
from mirror_worker.exactly_once.stream_transaction import StreamTransaction
from mirror_worker.topics.admin import TopicInfo

if TYPE_CHECKING:
    from mirror_worker.engine.schema_gate import SchemaGate


@dataclass
class SourceStream:
    """One source cluster: its consumer, ledger and the topics it mirrors."""

    alias: str
    consumer: Consumer
    cluster_id: str
    same_cluster_as_destination: bool
    ledger: OffsetLedger = field(default_factory=OffsetLedger)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    assigned: set[tuple[str, int]] = field(default_factory=set)
    stash: list = field(default_factory=list)
    # A batch ended by an exception: records the consumer returned were neither handed over nor stashed.
    interrupted: bool = False
    # Handed to the producer since the last completed flush: topic -> [records, bytes, newest timestamp ms]
    pending: dict[str, list] = field(default_factory=dict)
    # Bumped by every revoke/loss: a batch fetched across one may hold records this worker no longer owns.
    rebalances: int = 0
    # Where the hot path finds a record's producer: the worker's shared list (indexed by Route.producer_index),
    # or, exactly-once, the stream's one transactional producer (a list of one, refilled when it is replaced).
    producers: list = field(default_factory=list)
    transactions: StreamTransaction | None = None
    reset_policy: str = "earliest"
    instance_id: str | None = None  # group.instance.id of a static member (config/membership.py)
    incremental_assignment: bool = False  # cooperative-sticky or the KIP-848 consumer protocol
    admin: AdminClient | None = None
    reads_committed: bool = True  # the consumer's isolation level: where the log ends for it (clients/log_ends.py)
    # Source topic ids, kept in commit metadata: a deleted-and-recreated topic is told from the old one.
    topic_ids: dict[str, str] = field(default_factory=dict)
    recreated: dict[str, str] = field(default_factory=dict)  # topic -> its id before it was recreated
    reported_loss: set[tuple[str, int]] = field(default_factory=set)
    width: int | None = None  # partitions the filter selected at start, when counted (statistics, fetch sizes)
    schemas: SchemaGate | None = None  # when this source and the destination have registries

    def drop_stashed(self, keys) -> None:
        """Stashed records of `keys` will not be produced (partitions released, rewound or moved)."""
        self.stash = [m for m in self.stash if (m.topic(), m.partition()) not in keys]
