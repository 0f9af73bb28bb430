"""One source cluster as the worker holds it: its consumer, offset ledger, topics and per-partition state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from mirror_worker.exactly_once import PartitionTransactions
from mirror_worker.ledger import OffsetLedger
from mirror_worker.topics import TopicInfo

if TYPE_CHECKING:
    from mirror_worker.schema_sync import SchemaSyncer


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
    # Handed to the producer since the last completed flush: topic -> [records, bytes, newest timestamp ms]
    pending: dict[str, list] = field(default_factory=dict)
    # Bumped by every revoke/loss: a batch fetched across one may hold records this worker no longer owns.
    rebalances: int = 0
    # Where the hot path finds a record's producer: the worker's shared list (indexed by Route.producer_index),
    # or, exactly-once, the transactional producer of each source partition (keyed by (topic, partition)).
    producers: list | dict = field(default_factory=list)
    transactions: PartitionTransactions | None = None
    reset_policy: str = "earliest"
    incremental_assignment: bool = False  # cooperative-sticky or the KIP-848 consumer protocol
    admin: AdminClient | None = None
    # Source topic ids, kept in commit metadata: a deleted-and-recreated topic is told from the old one.
    topic_ids: dict[str, str] = field(default_factory=dict)
    recreated: dict[str, str] = field(default_factory=dict)  # topic -> its id before it was recreated
    reported_loss: set[tuple[str, int]] = field(default_factory=set)
    schemas: SchemaSyncer | None = None  # when this source and the destination have registries
    schema_conflicts: dict[str, str] = field(default_factory=dict)  # topic -> why it is not mirrored
