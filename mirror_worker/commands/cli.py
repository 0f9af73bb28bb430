"""MirrorMaker's classic flags, verbatim (`--flag value` and `--flag=value`), into a MirrorConfig (command layer)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mirror_worker.commands.base import DISTRIBUTION, MODULE_COMMAND, OneLineParser, package_version
from mirror_worker.config.librdkafka import consumer_settings, producer_settings
from mirror_worker.config.membership import SLOT_ENV, SLOT_FLAG, parse_slot
from mirror_worker.config.model import MirrorConfig, build_mirror_config
from mirror_worker.config.posture import ALLOW_INSECURE_KEY, allowed_insecure
from mirror_worker.config.properties import load_properties
from mirror_worker.config.registry import PROPERTIES_PREFIX, check_registry_posture, registry_settings, split_properties
from mirror_worker.exceptions import ConfigError


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser(prog: str = MODULE_COMMAND) -> argparse.ArgumentParser:
    """The classic flags' parser; `prog`: the command as run (base.command_name), for the usage line."""
    parser = OneLineParser(
        prog=prog,
        allow_abbrev=False,
        description="Mirror topics from one or more source Kafka clusters into a destination cluster.",
    )
    add = parser.add_argument
    add("--consumer.config", dest="consumer_configs", action="append", default=[], metavar="FILE",
        help="source cluster consumer .properties (repeat for several source clusters)")
    add("--producer.config", dest="producer_config", metavar="FILE", help="destination producer .properties")
    add("--whitelist", metavar="REGEX", help="topics to mirror (a comma means |)")
    add("--blacklist", metavar="REGEX", help="topics not to mirror (a comma means |)")
    add("--num.streams", dest="num_streams", type=int, metavar="N", help="consumer streams (processes)")
    add("--num.producers", dest="num_producers", type=int, metavar="N", help="producers per stream")
    add("--preserve.partitions", dest="preserve_partitions", type=_bool, nargs="?", const=True,
        help="destination partition = source partition")
    add("--preserve.order", dest="preserve_order", type=_bool, nargs="?", const=True,
        help="keep per-partition order (each source partition feeds one destination partition)")
    add("--prefix", metavar="PREFIX", help="destination topic = PREFIX + source topic")
    add("--queue.size", dest="queue_size", type=int, metavar="N",
        help="records in flight (default: sized from the destination's round trip, 10000 when near)")
    add("--inflight.budget.bytes", dest="inflight_budget_bytes", type=int, metavar="BYTES",
        help="bytes of in-flight data (consumer prefetch, producer queues, the queued records' overhead) the "
             "worker sizes within (default 134217728)")
    add("--max.procs", dest="max_procs", type=int, metavar="N", help="cap on worker processes")
    add("--timings.producer.config", dest="timings_producer_config", metavar="FILE",
        help="producer .properties for heartbeat records (default: the producer's)")
    add("--schema.registry.url", dest="schema_registry_url", metavar="URL",
        help=f"source schema registry (of every --consumer.config cluster; its auth and TLS as {PROPERTIES_PREFIX}* "
             "keys of that file)")
    add("--destination.schema.registry.url", dest="destination_schema_registry_url", metavar="URL",
        help="destination schema registry: schemas are synced to it and schema ids rewritten (its auth and TLS "
             f"as {PROPERTIES_PREFIX}* keys of --producer.config)")
    add("--schema.sync.mode", dest="schema_sync", choices=("strict", "lenient"),
        help="strict (default): destination subjects are exact copies; lenient: they may hold extra versions")
    add("--schema.id.rewrite", dest="schema_id_rewrite", choices=("auto", "off", "force"),
        help="auto (default): rewrite a topic's keys/values only when it has a <topic>-key/-value subject; "
             "force: every key and value in Confluent framing; off: none")
    add("--schema.compatibility", dest="schema_compatibility", metavar="LEVEL",
        help="destination subjects' compatibility: MIRROR (default, the source's) or a level such as BACKWARD")
    add("--provenance.headers", dest="provenance_headers", type=_bool, nargs="?", const=True,
        help="add a header naming each record's source cluster, topic, partition and offset")
    add("--dead.letter.topic", dest="dead_letter_topic", metavar="TOPIC",
        help="opt-in: records the destination refuses go here instead of halting their partition")
    add("--offset.commit.interval.ms", dest="offset_commit_interval_ms", type=int, metavar="MS",
        help="how often delivered offsets are committed (default 5000)")
    add("--exactly.once", dest="exactly_once", type=_bool, nargs="?", const=True,
        help="write records and source positions in one destination transaction per source partition")
    add("--transaction.interval.ms", dest="transaction_interval_ms", type=int, metavar="MS",
        help="exactly-once: start a commit of the partitions' transactions this often (default 30)")
    add("--on.data.loss", dest="on_data_loss", choices=("halt", "reset"),
        help="when source records were deleted before being mirrored: halt the partition (default) or resume "
             "at the earliest record still there")
    add("--config.sync.interval.ms", dest="config_sync_interval_ms", type=int, metavar="MS",
        help="copy source topic configs to the destination this often (default 60000, 0 disables)")
    add("--config.sync.exclude", dest="config_sync_exclude", metavar="REGEXES",
        help="topic config keys never copied, on top of MirrorMaker 2's defaults (a comma separates regexes)")
    add("--static.membership", dest="static_membership", type=_bool, nargs="?", const=True,
        help="static group membership: a restarted worker takes its partitions back at once (see --worker.slot)")
    add(SLOT_FLAG, dest="worker_slot", metavar="N",
        help=f"this worker's slot among the mirror's workers (default ${SLOT_ENV}, else 0): with static "
             "membership, never two live workers of one mirror with the same slot")
    add("--metrics.port", dest="metrics_port", type=int, metavar="PORT", help="Prometheus endpoint port")
    add("--name", dest="name", default=None, metavar="NAME", help="mirror name (default: mirror)")
    add("--config", dest="spec", metavar="FILE", help="YAML mirror spec instead of the flags above")
    add("--mirror", dest="mirror", metavar="NAME", help="with --config: the mirror to run")
    add("--version", action="version", version=f"{DISTRIBUTION} {package_version()}",
        help="print the installed kafka-mirror version and exit")
    return parser


_CLI_FIELDS = (
    "whitelist", "blacklist", "num_streams", "num_producers", "preserve_partitions", "preserve_order",
    "prefix", "queue_size", "max_procs", "schema_registry_url", "provenance_headers", "dead_letter_topic",
    "metrics_port", "on_data_loss", "config_sync_interval_ms",
    "destination_schema_registry_url", "schema_sync", "schema_compatibility", "schema_id_rewrite",
    "static_membership", "transaction_interval_ms", "inflight_budget_bytes",
)


def parse_args(argv: list[str], prog: str = MODULE_COMMAND) -> argparse.Namespace:
    return build_parser(prog).parse_args(argv)


def config_from_args(args: argparse.Namespace) -> MirrorConfig:
    config = _mirror_config(args)
    slot = parse_slot(args.worker_slot, SLOT_FLAG) if args.worker_slot is not None else parse_slot(
        os.environ.get(SLOT_ENV), SLOT_ENV)
    if slot is None:
        return config
    # The slot belongs to the process, not to the mirror: it joins whichever way the mirror was given.
    return build_mirror_config({**config.model_dump(), "worker_slot": slot}, where=SLOT_FLAG)


def _mirror_config(args: argparse.Namespace) -> MirrorConfig:
    if args.spec:
        from mirror_worker.config.spec import select_mirror

        flags = [
            f for f in _CLI_FIELDS + ("producer_config", "offset_commit_interval_ms", "timings_producer_config",
                                      "exactly_once", "config_sync_exclude")
            if getattr(args, f) not in (None, [])
        ]
        if args.consumer_configs or flags:
            raise ConfigError("--config cannot be combined with the classic flags; put them in the spec")
        return select_mirror(Path(args.spec), args.mirror)
    if args.mirror:
        raise ConfigError("--mirror needs --config")
    if not args.consumer_configs:
        raise ConfigError("--consumer.config is required (one per source cluster)")
    if not args.producer_config:
        raise ConfigError("--producer.config is required")
    if (args.whitelist is None) == (args.blacklist is None):
        raise ConfigError("exactly one of --whitelist and --blacklist is required")

    name = args.name or "mirror"
    sources, group_ids = [], []
    for path in args.consumer_configs:
        where = f"--consumer.config {path}"
        kafka, registry = _split(path, args.schema_registry_url, "--schema.registry.url")
        settings = consumer_settings(kafka, where, sized_by_round_trip=True)
        group = settings.get("group.id")
        first = next((g for g in group_ids if g), None)
        if group and first and group != first:
            raise ConfigError(f"{where}: group.id: {group} differs from {first} of the consumer config before "
                              "(one mirror, one consumer group)")
        group_ids.append(group)
        sources.append({"name": Path(path).stem, "consumer": settings, "schema_registry": registry})
    kafka, destination_registry = _split(args.producer_config, args.destination_schema_registry_url,
                                         "--destination.schema.registry.url")
    producer = producer_settings(kafka, f"--producer.config {args.producer_config}", args.queue_size,
                                 exactly_once=bool(args.exactly_once))
    fields = {k: getattr(args, k) for k in _CLI_FIELDS if getattr(args, k) is not None}
    fields["destination_schema_registry"] = destination_registry
    fields.update(
        name=name,
        sources=sources,
        producer=producer,
        group_id=next((g for g in group_ids if g), f"kafka-mirror.{name}"),
    )
    if args.exactly_once:
        fields["delivery"] = "exactly-once"
    if args.config_sync_exclude:
        fields["config_sync_exclude"] = [p.strip() for p in args.config_sync_exclude.split(",") if p.strip()]
    if args.offset_commit_interval_ms is not None:
        fields["commit_interval_s"] = args.offset_commit_interval_ms / 1000
    if args.timings_producer_config:
        path = args.timings_producer_config
        fields["heartbeat_producer"] = producer_settings(load_properties(path), f"--timings.producer.config {path}", 1000)
    return build_mirror_config(fields, where="flags")


def _split(path: str, url: str | None, flag: str) -> tuple[dict[str, str], dict[str, str]]:
    """A side's `.properties`: its Kafka settings and the settings of its registry (`schema.registry.*` keys,
    placeholders resolved as a spec's), the registry's URL checked against the file's opt-ins: an http://
    registry off loopback, or credentials over http://, need `allow-insecure=http-registry` there."""
    kafka, raw = split_properties(load_properties(path))
    registry = registry_settings(raw, f"{path}: {PROPERTIES_PREFIX}*")
    if url:
        opt_ins = allowed_insecure(kafka.get(ALLOW_INSECURE_KEY), f"{flag} ({path})")
        check_registry_posture(url, registry, opt_ins, f"{flag} ({path})")
    return kafka, registry
