"""Errors of the data plane. Bad input (exit 2) derives from ConfigError; runtime failures do not."""


class MirrorError(Exception):
    """Base class of every mirror worker error."""


class ConfigError(MirrorError):
    """Invalid input: flags, files, spec, client settings. The CLI prints it on one line and exits 2."""


class TopicMappingError(ConfigError):
    """A mapping would mirror a topic into itself or into a cycle."""


class UnreachableClusterError(ConfigError):
    """A cluster did not answer within the bounded start-up wait."""


class StopInterrupted(MirrorError):
    """A stop (SIGTERM, SIGINT, SIGHUP) came while the worker waited on a cluster for a step it needs before it
    copies (exactly-once: its transactional producer starting, the earlier writers of partitions just assigned
    being fenced): nothing of that step was consumed or committed; the command exits as for any clean stop."""


class StoppedBeforeStart(StopInterrupted):
    """A stop came while the worker was still waiting for its clusters: nothing was consumed or committed yet."""


class ClusterRefusedError(ConfigError):
    """A cluster refused the worker's credentials (SASL) or the TLS handshake failed."""


class PartitionHaltedError(MirrorError):
    """A partition cannot make progress without losing or skipping records; it is stopped."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str) -> None:
        self.topic, self.partition, self.offset, self.reason = topic, partition, offset, reason
        super().__init__(f"partition {topic}[{partition}] halted at offset {offset}: {reason}")


class FatalMirrorError(MirrorError):
    """The worker cannot go on (fatal producer error, lost fencing, ...)."""


class SchemaConflict(MirrorError):
    """A destination subject does not hold what the schema-sync mode requires; its topic is not mirrored."""

    def __init__(self, topic: str, reason: str) -> None:
        self.topic, self.reason = topic, reason
        super().__init__(f"schema conflict on topic {topic}: {reason}")


class UnknownSchemaId(MirrorError):
    """A record is framed with a schema id the source registry does not know."""


class SchemaRegistryUnavailable(MirrorError):
    """A schema registry did not answer, or answered with an unexpected error."""
