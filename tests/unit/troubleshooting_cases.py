"""The inputs that make the commands print the lines of docs/operations/troubleshooting.md (test_troubleshooting.py
runs them): a small spec and client files whose clusters are nowhere (127.0.0.1:1), and ways to break them."""

from __future__ import annotations

NOWHERE = "127.0.0.1:1"
SPEC = f"""groups:
  - name: g
    source: {{name: east, kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    destination: {{kafka: {{bootstrap.servers: "{NOWHERE}"}}}}
    mirrors:
      - name: orders
        whitelist: "orders"
        startup-timeout-s: 1
"""
MIRROR = "      - name: orders\n"
SOURCE = f'source: {{name: east, kafka: {{bootstrap.servers: "{NOWHERE}"}}}}'
DESTINATION = f'destination: {{kafka: {{bootstrap.servers: "{NOWHERE}"}}}}'
CONSUMER = f"bootstrap.servers={NOWHERE}\ngroup.id=g\n"
PRODUCER = f"bootstrap.servers={NOWHERE}\n"


def with_mirror_keys(text: str) -> str:
    """The spec with `text` (YAML lines of the mirror) added to its mirror."""
    return SPEC.replace(MIRROR, MIRROR + "".join(f"        {line}\n" for line in text.splitlines()))


def with_source_kafka(text: str) -> str:
    """The spec with `text` (`key: value, ...`) added to the source's kafka settings."""
    return SPEC.replace(SOURCE, SOURCE.replace(f'"{NOWHERE}"', f'"{NOWHERE}", {text}'))


def with_registry(side: str, text: str) -> str:
    """The spec with `text` (`key: value, ...`) added to the source's or the destination's cluster mapping."""
    cluster = SOURCE if side == "source" else DESTINATION
    return SPEC.replace(cluster, cluster[:-1] + f", {text}}}")


def with_reverse(text: str = "", forward: str = "provenance-headers: true") -> str:
    """The spec with a failback mirror `back` of `orders` (its keys: `text`; the forward mirror's: `forward`)."""
    keys = "".join(f"        {line}\n" for line in text.splitlines())
    return (with_mirror_keys(forward) + "      - name: back\n        startup-timeout-s: 1\n"
            + (keys or "        reverse-of: orders\n"))


# The commands, as `python -m` runs them: (module, its main).
WORKER, CATCHUP, CHECK = "mirror_worker.commands.main", "spark_jobs.catchup.job", "spark_jobs.check.job"
FLAGS = ["--consumer.config", "{dir}/c.properties", "--producer.config", "{dir}/p.properties"]
SPEC_FLAGS = ["--config", "{dir}/spec.yaml"]
CHECK_FLAGS = ["--config", "{dir}/spec.yaml", "--report", "{dir}/r.json"]
CATCHUP_FLAGS = ["--config", "{dir}/spec.yaml"]
EXPLICIT = ["--source.bootstrap.servers", NOWHERE, "--destination.bootstrap.servers", NOWHERE, "--topics", "a"]


def case(command: str, *argv: str, exit_code: int = 2, cluster: dict[str, int] | None | bool = False,
         **files: str) -> tuple:
    """A command's argv ({dir}: a folder holding c.properties, p.properties and spec.yaml, and `files`: name ->
    text, a name's `_` read as `.`), the exit code the page gives, and for the Spark jobs the clusters they see
    (a FakeCluster's topics, None for a cluster that does not answer; False: no fake)."""
    return command, list(argv), exit_code, {name.replace("_", "."): text for name, text in files.items()}, cluster


class FakeCluster:
    """What a Spark job's metadata reader (spark_jobs/common/kafka_meta.py) sees of a cluster, through its consumer
    and its admin client: these topics (name -> partitions), each partition holding offsets 0..10, or, for None, a
    cluster that does not answer."""

    def __init__(self, topics: dict[str, int] | None) -> None:
        self.topics = topics

    def consumer(self, *_settings):
        return self

    def list_topics(self, timeout: float):
        from types import SimpleNamespace

        from confluent_kafka import KafkaError, KafkaException

        if self.topics is None:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata"))
        return SimpleNamespace(cluster_id="fake", topics={
            name: SimpleNamespace(partitions=dict.fromkeys(range(count)), error=None)
            for name, count in self.topics.items()})

    def admin(self, *_settings, **_options):
        return self

    def list_offsets(self, requests, isolation_level=None, request_timeout=None):
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        from tests.unit.fakes import FakeFuture

        return {tp: FakeFuture(TopicPartition(tp.topic, tp.partition, 0 if spec == OffsetSpec.earliest() else 10))
                for tp, spec in requests.items()}

    def close(self) -> None:
        pass
