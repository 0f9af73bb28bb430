"""What a Spark job works on: a mirror (from the YAML spec, or explicit flags) and its topics.

Both jobs take `--config mirrors.yaml --mirror NAME` or `--source.bootstrap.servers`,
`--destination.bootstrap.servers`, `--topics a,b`, `--prefix P`; this module turns either into one
`JobTarget`. Bad input raises `JobInputError`, which the jobs turn into one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from mirror_worker.batch_api import (
    ConfigError, IdentityPolicy, NamingPolicy, PrefixPolicy, connection_settings, consumer_settings,
    java_security_settings, producer_settings, reads_committed, resets_to_earliest,
)
from spark_jobs.common.stable_offsets import isolation_option


class JobInputError(Exception):
    """Bad input for a Spark job: unknown topic, unreachable cluster, bad window, bad flags."""


@dataclass(frozen=True)
class JobTarget:
    source_bootstrap: str
    destination_bootstrap: str
    topics: tuple[str, ...]
    policy: NamingPolicy = field(default_factory=IdentityPolicy)
    group_id: str | None = None
    preserve_partitions: bool = True
    # The worker's resolved librdkafka settings (client_config.consumer_settings / producer_settings:
    # secrets read, Java keys translated, defaults in); kept out of repr: they hold credentials.
    source_settings: dict = field(default_factory=dict, repr=False)
    destination_settings: dict = field(default_factory=dict, repr=False)
    topic_filter: object | None = None                        # from the spec, when --topics is not given
    on_data_loss: str = "halt"                                # MirrorConfig.on_data_loss
    preserve_order: bool = False                              # MirrorConfig.preserve_order (routing)
    provenance_headers: bool = False                          # MirrorConfig.provenance_headers
    source_alias: str = "source"                              # the source's name in provenance headers
    mirror: object | None = field(default=None, repr=False)  # the MirrorConfig (--config): schema sync, if any

    def destination_topic(self, source_topic: str) -> str:
        return self.policy.remote_topic(source_topic)

    def connection(self, side: str) -> dict:
        """How to reach and authenticate to the source or destination cluster, for any librdkafka client."""
        settings = self.source_settings if side == "source" else self.destination_settings
        bootstrap = self.source_bootstrap if side == "source" else self.destination_bootstrap
        return {**connection_settings(settings), "bootstrap.servers": bootstrap}

    @property
    def reset_to_earliest(self) -> bool:
        """Where a partition without a committed offset starts, as the worker would start it."""
        return resets_to_earliest(self.source_settings.get("auto.offset.reset", "earliest"))

    @property
    def reads_committed(self) -> bool:
        """Whether the worker reads the source read_committed (it does unless its settings say otherwise)."""
        return reads_committed(self.source_settings)

    def spark_options(self, side: str) -> dict[str, str]:
        """Kafka client settings as Spark's `kafka.`-prefixed source/sink options."""
        settings = self.source_settings if side == "source" else self.destination_settings
        bootstrap = self.source_bootstrap if side == "source" else self.destination_bootstrap
        # Spark's Kafka client is the Java one: the spec's settings are librdkafka's (see mirror_worker/config/security.py).
        security = java_security_settings(settings)
        # The destination is read as its consumers read it: an exactly-once mirror writes transactions there.
        committed = side == "destination" or self.reads_committed
        return {"kafka.bootstrap.servers": bootstrap, **{f"kafka.{k}": v for k, v in security.items()},
                **isolation_option(committed)}


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def epoch_ms(text: str) -> int:
    """Epoch milliseconds from `1714521600000` or an ISO-8601 time (UTC unless it carries a zone); ValueError
    otherwise. Never negative from digits: Kafka's offsets-for-times reads -1/-2 as latest/earliest."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise JobInputError(message)


def base_parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = _OneLineParser(prog=prog, description=description, allow_abbrev=False)
    add = parser.add_argument
    add("--config", help="YAML mirror spec (the worker's)")
    add("--mirror", help="with --config: the mirror")
    add("--source.bootstrap.servers", dest="source_bootstrap", help="without --config: the source cluster")
    add("--destination.bootstrap.servers", dest="destination_bootstrap", help="without --config: the destination cluster")
    add("--topics", help="comma list of source topics (default with --config: all the mirror selects)")
    add("--prefix", help="destination topic = prefix + source topic")
    add("--group.id", dest="group_id", help="the mirror's consumer group on the source")
    add("--master", default=None, help="Spark master (default: local[*] unless spark-submit set one)")
    return parser


def target_from_args(args: argparse.Namespace) -> JobTarget:
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip()) if args.topics else ()
    if args.config:
        if args.source_bootstrap or args.destination_bootstrap:
            raise JobInputError("--config cannot be combined with --source/--destination.bootstrap.servers")
        from pathlib import Path

        from mirror_worker.batch_api import select_mirror

        try:
            mirror = select_mirror(Path(args.config), args.mirror)
        except ConfigError as exc:
            raise JobInputError(str(exc)) from None
        source = mirror.sources[0]
        if len(mirror.sources) > 1:
            raise JobInputError(f"mirror {mirror.name!r} has several sources; Spark jobs take one")
        policy = PrefixPolicy(args.prefix) if args.prefix else mirror.naming_policy()
        return JobTarget(
            source_bootstrap=source.consumer["bootstrap.servers"],
            destination_bootstrap=mirror.producer["bootstrap.servers"],
            topics=topics,
            policy=policy,
            group_id=args.group_id or source.consumer.get("group.id") or mirror.group_id,
            preserve_partitions=mirror.preserve_partitions,
            source_settings=dict(source.consumer),
            destination_settings=dict(mirror.producer),
            topic_filter=mirror.topic_filter(),
            on_data_loss=mirror.on_data_loss,
            preserve_order=mirror.preserve_order,
            provenance_headers=mirror.provenance_headers,
            source_alias=source.name,
            mirror=mirror,
        )
    missing = [flag for flag, value in (("--source.bootstrap.servers", args.source_bootstrap),
                                        ("--destination.bootstrap.servers", args.destination_bootstrap),
                                        ("--topics", topics)) if not value]
    if missing:
        raise JobInputError(f"{missing[0]} is required (or --config mirrors.yaml --mirror NAME)")
    try:
        policy = PrefixPolicy(args.prefix) if args.prefix else IdentityPolicy()
        source = consumer_settings({"bootstrap.servers": args.source_bootstrap}, "--source.bootstrap.servers")
        destination = producer_settings({"bootstrap.servers": args.destination_bootstrap},
                                        "--destination.bootstrap.servers", 10_000)
    except ConfigError as exc:
        raise JobInputError(str(exc)) from None
    return JobTarget(
        source_bootstrap=args.source_bootstrap,
        destination_bootstrap=args.destination_bootstrap,
        topics=topics,
        policy=policy,
        group_id=args.group_id,
        source_settings=source,
        destination_settings=destination,
    )
