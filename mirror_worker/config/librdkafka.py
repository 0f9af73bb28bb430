"""Kafka client settings: Java-style files in, checked librdkafka settings out.

MirrorMaker users bring Java client `.properties`. Keys that only the Java client knows are translated
where librdkafka has an equivalent and dropped where they are meaningless here (serializers: the
mirror copies bytes). Everything else goes to librdkafka as is, which rejects unknown keys; that
rejection is turned into a one-line ConfigError naming the key and where it came from.
"""

from __future__ import annotations

import logging
import re

from confluent_kafka import Consumer, KafkaException, Producer

from mirror_worker.config.fetch_sizes import WAN_FETCH_MAX_BYTES, message_max_bytes
from mirror_worker.config.placeholders import PLACEHOLDER, PlaceholderRule, check_host_reach, resolve_placeholders
from mirror_worker.config.posture import ALLOW_INSECURE_KEY, allowed_insecure, check_client
from mirror_worker.config.security import translate_security
from mirror_worker.exceptions import ConfigError
from mirror_worker.redaction import REDACTED, is_secret_key, redact_text, register_secrets

log = logging.getLogger(__name__)
# The throw-away clients that check settings warn about the missing bootstrap.servers: keep them quiet.
_probe_log = logging.getLogger("mirror_worker.config_probe")
_probe_log.addHandler(logging.NullHandler())
_probe_log.propagate = False

_DROPPED_JAVA_KEYS = {
    "key.deserializer", "value.deserializer", "key.serializer", "value.serializer",
    "exclude.internal.topics", "max.poll.records", "interceptor.classes", "metric.reporters",
}
_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "cooperative-sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}

# What the worker needs, whatever the files say. (key, value, why a different value is refused)
_CONSUMER_FORCED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
}
CONSUMER_DEFAULTS = {
    "auto.offset.reset": "earliest",
    # Bounds the consumer's prefetch: with the producer's queue.size this bounds the worker's memory.
    "queued.max.messages.kbytes": "16384",
    # fetch.max.bytes and max.partition.fetch.bytes are not among these: the worker's follow the source's round
    # trip (fetch_sizes_for); consumer_settings gives every other caller WAN_FETCH_MAX_BYTES.
    # When that prefetch is full, librdkafka waits this long before it fetches again (default 1000 ms):
    # meanwhile the loop drains the queue and starves. 10 ms took 1 KiB records from 32K to ~100K msgs/s
    # and 100 B from 120K to ~260K on the bench, memory unchanged (issue #7).
    "fetch.queue.backoff.ms": "10",
    # New partitions and topics are seen within seconds, not librdkafka's default 5 minutes.
    "topic.metadata.refresh.interval.ms": "10000",
    # The members learn of a rebalance at their next heartbeat (a cooperative one takes two rounds, an
    # eager one, see assignment_strategy, one): with the default 3 s, a worker joining (a second --num.streams process, another Airflow
    # worker task) stalled the partitions being moved for about 6 s, and two processes copied 1M records
    # at 0.7x the rate of one (bench.compare --procs 2); at 300 ms, 1.0-1.2x. Two small requests a second.
    "heartbeat.interval.ms": "300",
}


# The KIP-848 consumer protocol assigns on the broker and takes the heartbeat interval from it: librdkafka
# refuses the classic-protocol keys with group.protocol=consumer (assignment_strategy adds none then).
_CLASSIC_ONLY_DEFAULTS = ("heartbeat.interval.ms",)
# ... where the broker's `range` assignor shares out each topic, incrementally (the broker's default,
# `uniform`, balances counts only: in bench/join_stall.py it left the busy topic whole on one worker).
_CONSUMER_PROTOCOL_DEFAULTS = {"group.remote.assignor": "range"}
_PRODUCER_REQUIRED = {
    "acks": ({"all", "-1"}, "at-least-once needs acks=all"),
    "enable.idempotence": ({"true"}, "per-partition order needs enable.idempotence=true"),
}
# batch.size is not among these: the mirrored records' producers get batch_size_for's (below).
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": "true",
    # Latency at ordinary rates: 1 ms instead of 5 took the 10,000 msgs/s p50 from ~15 to ~9 ms on the
    # bench; full-speed batches fill while earlier requests are in flight, so throughput held (issue #17).
    "linger.ms": "1",
    "compression.type": "lz4",
    # Never give up on a record: an unavailable destination holds the mirror back instead.
    "message.timeout.ms": "0",
    # Same key -> same partition as Java clients (MirrorMaker's default partitioner).
    "partitioner": "murmur2_random",
}


def translate_java_settings(settings: dict[str, str], where: str,
                            placeholders: PlaceholderRule | None = None) -> dict[str, str]:
    """Map Java-client keys onto librdkafka's; reject what cannot work at all.

    `${file:...}` placeholders are resolved first, as `placeholders` allows (default: a spec's rule,
    config/placeholders.py), and security keys translated (config/security.py); every secret value is
    registered for redaction before anything can print it. The result must pass the security posture
    (config/posture.py), with the opt-ins of the settings' own `allow-insecure` key.
    """
    register_secrets(settings)
    settings = dict(settings)
    allowed = allowed_insecure(settings.pop(ALLOW_INSECURE_KEY, None), where)
    settings = translate_security(resolve_placeholders(settings, where, placeholders), where)
    register_secrets(settings)
    check_client(settings, allowed, where)
    out: dict[str, str] = {}
    for key, value in settings.items():
        if key == "zookeeper.connect":
            raise ConfigError(f"{where}: zookeeper.connect is the removed old consumer; use bootstrap.servers")
        if key in _DROPPED_JAVA_KEYS:
            log.debug("ignoring Java-only client key %s from %s", key, where)
            continue
        if key == "partition.assignment.strategy":
            value = ",".join(_ASSIGNORS.get(v.strip(), v.strip()) for v in value.split(","))
        elif key == "buffer.memory":
            key, value = "queue.buffering.max.kbytes", str(max(1, int(value) // 1024))
        elif key == "max.request.size":
            key = "message.max.bytes"
        out[key] = str(value)
    return out


def consumer_settings(settings: dict[str, str], where: str, placeholders: PlaceholderRule | None = None,
                      sized_by_round_trip: bool = False) -> dict[str, str]:
    """A consumer's librdkafka settings: `settings` translated and checked, over the worker's defaults.

    `sized_by_round_trip`: a mirror source's, whose fetch sizes the worker picks from the measured round trip
    (fetch_sizes_for): left out unless named. Any other caller gets WAN_FETCH_MAX_BYTES."""
    translated = translate_java_settings(settings, where, placeholders)
    for key, forced in _CONSUMER_FORCED.items():
        if translated.get(key, forced).lower() != forced:
            raise ConfigError(f"{where}: {key} must be {forced}: the mirror commits offsets itself, after delivery")
    defaults = dict(CONSUMER_DEFAULTS)
    if not sized_by_round_trip:
        defaults["fetch.max.bytes"] = str(max(WAN_FETCH_MAX_BYTES, message_max_bytes(translated)))
    if translated.get("group.protocol", "classic").lower() == "consumer":
        for key in _CLASSIC_ONLY_DEFAULTS:
            defaults.pop(key)
        defaults.update(_CONSUMER_PROTOCOL_DEFAULTS)
    merged = {**defaults, **translated, **_CONSUMER_FORCED}
    check_librdkafka(merged, "consumer", where)
    return merged


def assignment_strategy(consumer: dict[str, str], exactly_once: bool) -> dict[str, str]:
    """The mirror group's assignor on the classic protocol, unless the settings name one (the worker adds it).

    A mirror's load is per topic. The sticky assignors balance partition counts: with a busy and an idle
    topic, a second worker joining got the whole busy topic and the first kept the idle one (cooperative-
    sticky; KIP-848's `uniform` kept it all on the first). roundrobin shares out every topic (±1 partition per
    member). It is eager: a join revokes every partition for one round, which with the 300 ms heartbeat cost
    the running worker ~50 ms of latency in bench/join_stall.py (2026-11-25), less than the moved partitions
    waited under cooperative-sticky (~550 ms); static membership keeps restarts free of rebalances either way.
    Exactly-once keeps cooperative-sticky: an eager rebalance revokes every partition at each join, and each
    revoke ends the source's open transaction and releases, then claims again, the positions of every
    partition (exactly_once/stream_transaction.py), where cooperative moves only those that change owner. With
    the KIP-848 protocol the broker assigns (`group.remote.assignor`, default range above)."""
    if consumer.get("group.protocol", "classic").lower() == "consumer" or "partition.assignment.strategy" in consumer:
        return {}
    return {"partition.assignment.strategy": "cooperative-sticky" if exactly_once else "roundrobin"}


# Exactly-once, unless the settings name one: a record is visible only once its transaction commits, and the
# commit sends what still lingers at once, so lingering costs no visibility and merges the few records each
# consume round hands a partition into fewer produce requests to the destination broker, which answers the
# transactions' own requests sooner. Bench (1M x 100 B, then 10,000 msgs/s, 2 runs x 2 repeats each,
# docs/benchmarks): exactly-once p99 67.6-75.0 ms at 5 against 83.7-115.3 at 1; copy ratio and CPU about the same.
# 20 ms gave 57.7-79.1 but cost a tenth of the copy rate and 1.2-1.3x the CPU (in-flight records wait longer).
EXACTLY_ONCE_LINGER_MS = "5"


def producer_settings(settings: dict[str, str], where: str, queue_size: int | None,
                      exactly_once: bool = False, placeholders: PlaceholderRule | None = None) -> dict[str, str]:
    """`queue_size`: the records in flight the producer takes (queue.buffering.max.messages, unless the settings
    name one); None leaves it to the worker, which sizes it from the destination's round trip (config/inflight.py)."""
    translated = translate_java_settings(settings, where, placeholders)
    for key, (allowed, why) in _PRODUCER_REQUIRED.items():
        if key in translated and translated[key].lower() not in allowed:
            raise ConfigError(f"{where}: {key}={translated[key]} refused: {why}")
    defaults = {**PRODUCER_DEFAULTS, **({"linger.ms": EXACTLY_ONCE_LINGER_MS} if exactly_once else {})}
    sized = {} if queue_size is None else {"queue.buffering.max.messages": str(queue_size)}
    merged = {**defaults, **sized, **translated}
    check_librdkafka(merged, "producer", where)
    return merged


def fitted_batch_size(configured: int, topic_limits) -> int:
    """The producer batch.size whose batches every destination topic accepts (`topic_limits`: their max.message.bytes).

    The broker checks a whole record batch against max.message.bytes and librdkafka does not split a refused
    batch. batch.size counts uncompressed bytes with framing; compressing incompressible data adds a little
    (lz4: under 1/255 plus a frame header), hence the margin. A single record above batch.size still goes alone.
    """
    smallest = min(topic_limits, default=None)
    if smallest is None:
        return configured
    return max(1, min(configured, smallest - max(1024, smallest // 64)))


# Unnamed, batch.size grows with what every destination topic accepts, up to this. A partition's records
# cross to its leader about one batch per round trip (bench/wan.py, 6 partitions, one destination broker,
# 50 ms RTT: ~1 MB batches held the copy at ~70,000-85,000 msgs/s of 1 KiB whatever the number of
# producers or records in flight; 4 MiB batches let it keep 98 % of its loopback rate). On loopback the
# size is no cost: linger.ms sends a batch as soon as a request slot is free, whatever it holds.
AUTO_BATCH_CEILING = 8 * 1024 * 1024
KAFKA_MAX_MESSAGE_BYTES = 1_048_588  # a topic's max.message.bytes unless the broker or the topic says otherwise


def batch_size_for(configured, topic_limits) -> int:
    """The mirrored records' producers' batch.size, for the worker and the Spark catch-up alike.

    `configured` (the settings' batch.size, or None): lowered to fit the destination topics, never raised.
    Unnamed: the largest batch every destination topic accepts, up to AUTO_BATCH_CEILING, and
    DEFAULT_BATCH_SIZE while no destination topic is known. Topics at Kafka's default limit (1048588) get
    about 1 MB batches, as before; a destination whose topics take larger ones (a WAN: see
    docs/operations/wan.md) gets them without a setting."""
    limits = list(topic_limits)
    if configured is not None:
        return fitted_batch_size(int(configured), limits)
    if not limits:
        return DEFAULT_BATCH_SIZE
    return fitted_batch_size(AUTO_BATCH_CEILING, limits)


# What batch_size_for gives for topics at Kafka's default limit, so that finding them changes nothing: 1,032,204.
DEFAULT_BATCH_SIZE = fitted_batch_size(AUTO_BATCH_CEILING, [KAFKA_MAX_MESSAGE_BYTES])


LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes
_MESSAGE_MAX_BYTES_LIMIT = 1_000_000_000  # the largest librdkafka takes
_REQUEST_ROOM = 64 * 1024  # a produce request's framing around its largest record batch


def fitted_message_max_bytes(configured: int | None, topic_limits) -> int | None:
    """The producer message.max.bytes a record as large as the largest destination topic's max.message.bytes
    passes, or None while librdkafka's default (or the value the settings name, `configured`) stays.
    librdkafka refuses a larger record in produce(), and the partition would halt."""
    if configured is not None:
        return None
    largest = max(topic_limits, default=0)
    if largest + _REQUEST_ROOM <= LIBRDKAFKA_MESSAGE_MAX_BYTES:
        return None
    return min(_MESSAGE_MAX_BYTES_LIMIT, largest + _REQUEST_ROOM)


def fitted_to_topics(settings: dict, topic_limits) -> dict[str, str]:
    """batch.size and, when needed, message.max.bytes for a producer of records bound for destination topics
    with these max.message.bytes (`settings`: the producer's, whose named values are kept or only lowered).
    The Spark catch-up and the bench's bare loop take them from here; the worker keeps them as state
    (engine/mirrored_producers.py fit_batches: its producers are replaced when they change)."""
    limits = list(topic_limits)
    fitted = {"batch.size": str(batch_size_for(settings.get("batch.size"), limits))}
    configured = settings.get("message.max.bytes")
    largest = fitted_message_max_bytes(int(configured) if configured else None, limits)
    if largest is not None:
        fitted["message.max.bytes"] = str(largest)
    return fitted


def setting_value(value) -> str:
    """A YAML/JSON scalar as a client setting string (booleans as Kafka spells them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def settings_from_connection(login: str | None, password: str | None, extra: dict | None,
                             where: str = "connection") -> dict[str, str]:
    """Client settings from an Airflow Kafka connection, for the Airflow hooks.

    `extra` holds the client config (as the Kafka provider's connections do; Java-style keys allowed);
    the connection's login and password become the SASL credentials. Placeholders follow the connection
    rule (config/placeholders.py: off unless the host names secrets directories, never `env`, never in
    the login), and so do private key files; keys that run code on the host are refused. The result is
    librdkafka settings, ready for consumer_settings/producer_settings with
    `placeholders=PlaceholderRule.connection()`; it keeps the extra's `allow-insecure` for them.
    """
    extra = dict(extra or {})
    opt_ins = allowed_insecure(extra.pop(ALLOW_INSECURE_KEY, None), where)
    settings = {str(k): setting_value(v) for k, v in extra.items()}
    if password:
        register_secrets({"sasl.password": password})
    if login and PLACEHOLDER.search(login):
        raise ConfigError(f"{where}: login: placeholders are not resolved here (the login is shown in clear)")
    for key, value in (("sasl.username", login), ("sasl.password", password)):
        if not value:
            continue
        if key in settings and settings[key] != value:
            raise ConfigError(f"{where}: {key} is set both in extra and as the connection's "
                              f"{'login' if key == 'sasl.username' else 'password'}")
        settings[key] = value
    if (login or password) and not settings.get("security.protocol", "").upper().startswith("SASL"):
        raise ConfigError(f"{where}: a login or password needs security.protocol SASL_SSL or SASL_PLAINTEXT in extra")
    if not settings.get("bootstrap.servers"):
        raise ConfigError(f"{where}: bootstrap.servers is required in extra")
    if opt_ins:
        settings[ALLOW_INSECURE_KEY] = ",".join(sorted(opt_ins))
    rule = PlaceholderRule.connection()
    check_host_reach(settings, rule, where)
    translated = translate_java_settings(settings, where, rule)
    return {**translated, **({ALLOW_INSECURE_KEY: ",".join(sorted(opt_ins))} if opt_ins else {})}


_NO_SUCH = re.compile(r'No such configuration property: "([^"]+)"')
_INVALID = re.compile(r'Invalid value (?:"[^"]*" )?for configuration property "([^"]+)"')
_ALIASES = {"queue.buffering.max.ms": "linger.ms", "batch.num.messages": "batch.size"}


def check_librdkafka(settings: dict[str, str], kind: str, where: str) -> None:
    """Let librdkafka judge keys and values, without connecting anywhere."""
    probe = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
    probe["logger"] = _probe_log
    try:
        if kind == "consumer":
            Consumer({"group.id": "config-check", **probe}).close()
        else:
            Producer(probe)
    except KafkaException as exc:
        text = str(exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc)
        if match := _NO_SUCH.search(text):
            raise ConfigError(f"{where}: unknown key {match.group(1)}") from None
        if match := _INVALID.search(text):
            key = match.group(1)
            if key not in settings and _ALIASES.get(key) in settings:
                key = _ALIASES[key]
            shown = REDACTED if is_secret_key(key) else repr(settings.get(key))
            raise ConfigError(f"{where}: invalid value {shown} for {key}") from None
        raise ConfigError(f"{where}: {redact_text(text)}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {redact_text(str(exc))}") from None


_CONNECTION_KEYS = ("bootstrap.servers", "security.protocol", "sasl.", "ssl.", "client.id", "socket.",
                    "broker.address.family")


def connection_settings(settings: dict) -> dict:
    """Only how to reach and authenticate to a cluster: for a consumer made from producer settings."""
    return {k: v for k, v in settings.items() if k.startswith(_CONNECTION_KEYS)}
