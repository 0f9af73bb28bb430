"""Apache MirrorMaker 2 in dedicated mode (`connect-mirror-maker`), set up like the worker's defaults.

The jars come from java/mm2/pom.xml (`scripts/setup-bench.sh`, run by `make bench`). Each run uses a
fresh source alias, so with the default replication policy its destination topics are
`<alias>.<topic>` and its Connect internal topics are new: runs never see each other's state.
"""

from __future__ import annotations

from pathlib import Path

from devstack import paths
from devstack.errors import SetupMissingError
from devstack.jdk import find_java
from mirror_worker.batch_api import (
    PRODUCER_DEFAULTS, KAFKA_MAX_MESSAGE_BYTES, WAN_PARTITION_FETCH_BYTES, batch_size_for,
)

MM2_LIBS = paths.CACHE / "mm2" / "libs"

_LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
logger.mirror.name = org.apache.kafka.connect.mirror
logger.mirror.level = INFO
"""


def mm2_properties(alias: str, source: str, destination: str, topics: list[str], tasks: int,
                   poll_records: int, exactly_once_rest_port: int | None = None,
                   destination_limit: int = KAFKA_MAX_MESSAGE_BYTES) -> str:
    """mm2.properties for one source -> destination flow of `topics`.

    Fairness: the destination producer gets the worker's producer defaults (acks=all, idempotence,
    linger.ms, compression.type) and the batch.size the worker would take for topics whose max.message.bytes
    is `destination_limit` (with a request size to carry such a batch when it is above Kafka's default);
    the source consumer the worker's max.partition.fetch.bytes; replication factor 1 everywhere (one-node clusters);
    checkpoints and heartbeats off (the worker emits neither per record); offset syncs stay on:
    they are MirrorMaker 2's own bookkeeping, as committed offsets are the worker's.

    exactly_once_rest_port: exactly-once source support (KIP-618, Kafka >= 3.5) towards the destination,
    as Kafka's geo-replication docs set it up for dedicated mode: `<target>.exactly.once.source.support =
    enabled`, the internal REST server on (dedicated mode needs it for exactly-once) listening on this
    port, and the source read `read_committed` so aborted transactions are never copied.
    """
    producer = {k: PRODUCER_DEFAULTS[k] for k in ("acks", "enable.idempotence", "linger.ms", "compression.type")}
    producer["batch.size"] = str(batch_size_for(None, [destination_limit]))
    if destination_limit > KAFKA_MAX_MESSAGE_BYTES:
        producer["max.request.size"] = str(destination_limit)
    settings = {
        "clusters": f"{alias}, destination",
        f"{alias}.bootstrap.servers": source,
        "destination.bootstrap.servers": destination,
        f"{alias}->destination.enabled": "true",
        f"destination->{alias}.enabled": "false",
        f"{alias}->destination.topics": "|".join(topics),
        "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
        "replication.policy.separator": ".",
        "tasks.max": str(tasks),
        "replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "emit.checkpoints.enabled": "false",
        "emit.heartbeats.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "5",
        # Kafka's recommended plugin discovery: skips a ~30 s classpath scan at start-up (this is no tuning
        # of the copy itself, only of the time to the first record).
        "plugin.discovery": "service_load",
        # The worker commits every 5 s; Connect's offset flush is the same bookkeeping.
        "offset.flush.interval.ms": "5000",
        f"{alias}.consumer.max.poll.records": str(poll_records),
        f"{alias}.consumer.auto.offset.reset": "earliest",
        # The worker's per-partition fetch size for a source across a WAN (the Java client's default is 1 MiB, as
        # librdkafka's, which the worker keeps for a source on loopback: MirrorMaker 2 never gets the smaller).
        f"{alias}.consumer.max.partition.fetch.bytes": str(WAN_PARTITION_FETCH_BYTES),
        **{f"destination.producer.{k}": v for k, v in producer.items()},
    }
    if exactly_once_rest_port is not None:
        settings.update({
            "destination.exactly.once.source.support": "enabled",
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": f"http://127.0.0.1:{exactly_once_rest_port}",
            f"{alias}.consumer.isolation.level": "read_committed",
        })
    return "".join(f"{k} = {v}\n" for k, v in settings.items())


def mm2_argv(workdir: Path, properties: str, heap_mb: int) -> list[str]:
    if not any(MM2_LIBS.glob("connect-mirror-*.jar")):
        raise SetupMissingError(f"MirrorMaker 2 jars missing in {MM2_LIBS}: run scripts/setup-bench.sh (make bench)")
    config = workdir / "mm2.properties"
    config.write_text(properties)
    log4j = workdir / "mm2-log4j2.properties"
    log4j.write_text(_LOG4J2)
    return [
        find_java(17), f"-Xmx{heap_mb}m", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{MM2_LIBS}/*",
        "org.apache.kafka.connect.mirror.MirrorMaker", str(config),
    ]
