import textwrap

import pytest

from mirror_worker.commands.cli import config_from_args, parse_args
from mirror_worker.config.model import TopicCreation
from mirror_worker.config.spec import load_entries, select_mirror
from mirror_worker.exceptions import ConfigError


@pytest.mark.parametrize("creation, source_partitions, source_rf, partitions, rf", [
    ({}, 6, 1, 6, 1),                                                          # mirror-source
    ({"partitions": 3}, 6, 1, 3, 1),                                           # fixed
    ({"max_partitions": 4}, 6, 1, 4, 1),                                       # clamped down
    ({"min_partitions": 8}, 6, 1, 8, 1),                                       # clamped up
    ({"replication_factor": 3, "max_replication_factor": 2}, 6, 1, 6, 2),
    ({"min_replication_factor": 2}, 6, 1, 6, 2),
])
def test_topic_creation_policy(creation, source_partitions, source_rf, partitions, rf):
    policy = TopicCreation(**creation)
    assert policy.partitions_for(source_partitions) == partitions
    assert policy.replication_factor_for(source_rf) == rf


@pytest.mark.parametrize("setting, brokers, rf", [
    (None, 3, 3),    # MirrorMaker 2's default for its internal topics
    (None, 5, 3),
    (None, 1, 1),    # a one-node development cluster
    (None, 2, 2),    # a broker of three down when the topic is made
    (5, 5, 5),
    (-1, 3, -1),     # the brokers' default.replication.factor
])
def test_the_workers_own_topics_are_replicated_as_the_destination_allows(setting, brokers, rf):
    creation = TopicCreation() if setting is None else TopicCreation(internal_replication_factor=setting)
    assert creation.internal_replication_factor_for(brokers) == rf


def test_internal_replication_factor_is_at_least_one_or_the_brokers_default():
    with pytest.raises(ValueError, match="internal_replication_factor must be at least 1, or -1"):
        TopicCreation(internal_replication_factor=0)


@pytest.fixture
def props(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)
    return write


def test_classic_flags_both_spellings(props):
    consumer = props("source.properties", "bootstrap.servers=127.0.0.1:1\ngroup.id=g1\nkey.deserializer=x\n")
    producer = props("dest.properties", "bootstrap.servers=127.0.0.1:2\n")
    config = config_from_args(parse_args([
        f"--consumer.config={consumer}", "--producer.config", producer, "--whitelist=orders,users",
        "--num.streams", "2", "--preserve.partitions", "--preserve.order=false", "--prefix=src.",
        "--queue.size", "500", "--max.procs=1",
    ]))
    assert config.sources[0].name == "source"
    assert config.sources[0].consumer["group.id"] == "g1"
    assert "key.deserializer" not in config.sources[0].consumer
    assert config.sources[0].consumer["enable.auto.commit"] == "false"
    assert config.producer["acks"] == "all" and config.producer["queue.buffering.max.messages"] == "500"
    assert config.preserve_partitions is True and config.preserve_order is False
    assert config.naming_policy().remote_topic("orders") == "src.orders"
    assert config.topic_filter().should_replicate("users")
    assert config.group_id == "g1" and config.process_count == 1


@pytest.mark.parametrize("consumer_text, producer_text, extra, message", [
    ("bootstrap.servers=a:1\nno.such.key=1\n", "bootstrap.servers=b:1\n", ["--whitelist=x"],
     r"--consumer.config .*source.properties: unknown key no.such.key"),
    ("bootstrap.servers=a:1\n", "bootstrap.servers=b:1\nacks=1\n", ["--whitelist=x"],
     r"acks=1 refused: at-least-once needs acks=all"),
    ("bootstrap.servers=a:1\nenable.auto.commit=true\n", "bootstrap.servers=b:1\n", ["--whitelist=x"],
     r"enable.auto.commit must be false"),
    ("bootstrap.servers=a:1\n", "bootstrap.servers=b:1\n", ["--whitelist=x", "--blacklist=y"],
     r"exactly one of --whitelist and --blacklist is required"),
    ("bootstrap.servers=a:1\n", "bootstrap.servers=b:1\n", [],
     r"exactly one of --whitelist and --blacklist is required"),
    ("bootstrap.servers=a:1\n", "bootstrap.servers=b:1\n", ["--whitelist=a(b"], r"whitelist: invalid regex"),
    ("bootstrap.servers=a:1\n", "bootstrap.servers=b:1\n", ["--whitelist=x", "--queue.size=ten"],
     r"argument --queue.size: invalid int value: 'ten'"),
    ("zookeeper.connect=z:2181\n", "bootstrap.servers=b:1\n", ["--whitelist=x"], r"zookeeper.connect is the removed old consumer"),
    ("group.id=g\n", "bootstrap.servers=b:1\n", ["--whitelist=x"], r"sources.0.consumer: bootstrap.servers is required"),
])
def test_classic_flags_bad_input(props, consumer_text, producer_text, extra, message):
    consumer = props("source.properties", consumer_text)
    producer = props("dest.properties", producer_text)
    with pytest.raises(ConfigError, match=message):
        config_from_args(parse_args(["--consumer.config", consumer, "--producer.config", producer, *extra]))


SPEC = """
group-id-prefix: "mirror."
groups:
  - name: main
    source:
      name: src
      kafka: {bootstrap.servers: "127.0.0.1:1"}
    destination:
      kafka: {bootstrap.servers: "127.0.0.1:2", linger.ms: 20}
    settings:
      preserve-partitions: true
      queue-size: 2000
    mirrors:
      - name: orders
        whitelist: "orders.*"
        prefix: "src."
      - name: users
        whitelist: "users"
        preserve-partitions: false
        group-id: custom-users
      - name: broken
        whitelist: "x"
        preserve-partitionz: true
      - name: paused
        whitelist: "y"
        enabled: false
      - name: quoted
        whitelist: "z"
        enabled: "false"
      - name: quoted-switch
        whitelist: "z"
        preserve-partitions: "no"
"""


def test_spec_merges_group_settings_and_isolates_broken_mirrors(tmp_path):
    path = tmp_path / "mirrors.yaml"
    path.write_text(SPEC)
    entries = {e.name: e for e in load_entries(path)}

    orders = entries["orders"].config
    assert orders.preserve_partitions is True and orders.queue_size == 2000
    assert orders.group_id == "mirror.orders" and orders.sources[0].name == "src"
    assert orders.producer["linger.ms"] == "20"
    users = entries["users"].config
    assert users.preserve_partitions is False and users.group_id == "custom-users"
    assert entries["broken"].config is None
    assert entries["broken"].error.endswith("mirror 'broken': preserve-partitionz: unknown key (did you mean preserve-partitions?)")
    assert entries["paused"].enabled is False
    # A quoted boolean is refused (bool("false") is true): the mirror is shown invalid, never run or skipped.
    assert entries["quoted"].enabled is True and entries["quoted"].config is None
    assert entries["quoted"].error.endswith("mirror 'quoted': enabled: must be true or false (a YAML boolean, unquoted)")
    assert entries["quoted-switch"].config is None and "preserve-partitions: Input should be a valid boolean" in \
        entries["quoted-switch"].error

    assert select_mirror(path, "orders") == orders
    with pytest.raises(ConfigError, match="preserve-partitionz: unknown key"):
        select_mirror(path, "broken")
    with pytest.raises(ConfigError, match="mirror 'paused' is disabled"):
        select_mirror(path, "paused")
    with pytest.raises(ConfigError, match="no mirror named 'nope'"):
        select_mirror(path, "nope")
    with pytest.raises(ConfigError, match="--mirror NAME is required"):
        select_mirror(path, None)


@pytest.mark.parametrize("text, message", [
    ("groups: [\n", "invalid YAML"),
    ("groups: []\n", "groups: a non-empty list is required"),
    ("groupz: []\n", "groupz: unknown key"),
])
def test_spec_file_level_errors(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_entries(path)


def test_spec_and_flags_do_not_mix(tmp_path):
    with pytest.raises(ConfigError, match="--config cannot be combined"):
        config_from_args(parse_args(["--config", str(tmp_path / "m.yaml"), "--whitelist", "x"]))


def test_consumers_heartbeat_often_so_a_rebalance_moves_partitions_within_a_second():
    from mirror_worker.config.librdkafka import consumer_settings

    assert consumer_settings({"bootstrap.servers": "b:1"}, "test")["heartbeat.interval.ms"] == "300"
    assert consumer_settings({"bootstrap.servers": "b:1", "heartbeat.interval.ms": "2000"},
                             "test")["heartbeat.interval.ms"] == "2000"
    # The KIP-848 protocol takes it from the broker, and assigns there: no classic-only default is added
    # (librdkafka refused the consumer that the default assignment strategy was added to).
    kip848 = consumer_settings({"bootstrap.servers": "b:1", "group.protocol": "consumer"}, "test")
    assert "heartbeat.interval.ms" not in kip848 and "partition.assignment.strategy" not in kip848
    # Each topic shared out among the members: roundrobin on the classic protocol (cooperative-sticky for
    # exactly-once: its per-partition producers), the broker's range on KIP-848; a setting of the spec wins.
    from mirror_worker.config.librdkafka import assignment_strategy

    classic = consumer_settings({"bootstrap.servers": "b:1"}, "test")
    assert assignment_strategy(classic, False) == {"partition.assignment.strategy": "roundrobin"}
    assert assignment_strategy(classic, True) == {"partition.assignment.strategy": "cooperative-sticky"}
    assert assignment_strategy(kip848, False) == {} and assignment_strategy(kip848, True) == {}
    chosen = consumer_settings({"bootstrap.servers": "b:1", "partition.assignment.strategy": "range"}, "test")
    assert assignment_strategy(chosen, False) == {} and chosen["partition.assignment.strategy"] == "range"
    assert kip848["group.remote.assignor"] == "range"
    assert consumer_settings({"bootstrap.servers": "b:1", "group.protocol": "consumer",
                              "group.remote.assignor": "uniform"}, "test")["group.remote.assignor"] == "uniform"


@pytest.mark.parametrize("edit, mirror, error", [
    (("kafka: {bootstrap.servers: \"127.0.0.1:1\"}", "kafka: {bootstrap.servers: \"127.0.0.1:1\", group.id: g}"),
     "orders", "source 'src' kafka: group.id: the mirror's consumer group is its group-id"),
    (("queue-size: 2000", "queue-size: 2000\n      group-id: shared"), "orders", "group settings: group-id: every mirror"),
    (("group-id: custom-users", "group-id: mirror.orders"), "users",
     "mirror 'users': group-id: mirror.orders is also mirror 'orders''s consumer group"),
])
def test_one_consumer_group_per_mirror_and_one_id_everywhere(tmp_path, edit, mirror, error):
    path = tmp_path / "mirrors.yaml"
    path.write_text(SPEC.replace(*edit))
    with pytest.raises(ConfigError, match=error.replace("'", ".").replace("(", ".")):
        select_mirror(path, mirror)


def test_consumer_configs_must_agree_on_the_group(props):
    east = props("east.properties", "bootstrap.servers=127.0.0.1:1\ngroup.id=g1\n")
    west = props("west.properties", "bootstrap.servers=127.0.0.1:1\ngroup.id=g2\n")
    same = props("same.properties", "bootstrap.servers=127.0.0.1:1\ngroup.id=g1\n")
    producer = props("dest.properties", "bootstrap.servers=127.0.0.1:2\n")
    args = ["--producer.config", producer, "--whitelist", "x"]
    with pytest.raises(ConfigError, match=f"--consumer.config {west}: group.id: g2 differs from g1"):
        config_from_args(parse_args(["--consumer.config", east, "--consumer.config", west, *args]))
    config = config_from_args(parse_args(["--consumer.config", east, "--consumer.config", same, *args]))
    assert config.group_id == "g1"


LINGER_SPEC = """
groups:
  - name: main
    source:
      kafka: {bootstrap.servers: "127.0.0.1:1"}
    destination:
      kafka: {bootstrap.servers: "127.0.0.1:2"}
    mirrors:
      - name: copied
        whitelist: "a"
      - name: transactional
        whitelist: "b"
        delivery: exactly-once
"""


def test_exactly_once_producers_linger_longer_unless_the_settings_name_a_linger(props, tmp_path):
    """A transaction's records are visible only once it commits, and the commit sends what lingers at once:
    exactly-once producers linger 5 ms (fewer produce requests per transaction), at-least-once keep 1 ms."""
    consumer = props("source.properties", "bootstrap.servers=127.0.0.1:1\ngroup.id=g1\nisolation.level=read_committed\n")
    plain = props("dest.properties", "bootstrap.servers=127.0.0.1:2\n")
    own = props("dest-linger.properties", "bootstrap.servers=127.0.0.1:2\nlinger.ms=3\n")

    def flags(producer, *extra):
        return config_from_args(parse_args(["--consumer.config", consumer, "--producer.config", producer,
                                            "--whitelist", "t", *extra])).producer["linger.ms"]

    assert flags(plain) == "1"
    assert flags(plain, "--exactly.once") == "5"
    assert flags(own, "--exactly.once") == "3"
    path = tmp_path / "mirrors.yaml"
    path.write_text(LINGER_SPEC)
    entries = {e.name: e.config for e in load_entries(path)}
    assert entries["copied"].producer["linger.ms"] == "1"
    assert entries["transactional"].producer["linger.ms"] == "5"
    path.write_text(LINGER_SPEC.replace('"127.0.0.1:2"}', '"127.0.0.1:2", linger.ms: 3}'))
    entries = {e.name: e.config for e in load_entries(path)}
    assert entries["transactional"].producer["linger.ms"] == "3" and entries["copied"].producer["linger.ms"] == "3"
