"""The YAML mirror spec: groups of mirrors sharing source(s) and destination (as viooh-mirror has).

    group-id-prefix: mirror.            # consumer group = prefix + mirror name, unless group-id is given
    groups:
      - name: local
        source:                          # or `sources:` with a list of these
          name: source
          kafka: {bootstrap.servers: "127.0.0.1:9092"}
          schema-registry-url: http://127.0.0.1:8081/apis/ccompat/v7
        destination:
          kafka: {bootstrap.servers: "127.0.0.1:9093"}
          schema-registry-url: https://...
          schema-registry:                # auth and TLS of that registry (config/registry.py)
            basic.auth.user.info: ${file:/run/secrets/registry.properties:destination.user.info}
            ssl.ca.location: /etc/mirror/registry-ca.pem
        settings: {preserve-partitions: true}     # merged into every mirror; a mirror's own keys win
        mirrors:
          - name: orders
            whitelist: "orders\\..*"
            prefix: "src."
            enabled: true
      - name: back                       # failback: source and destination swapped
        source: {name: destination, kafka: {bootstrap.servers: "127.0.0.1:9093"}}
        destination: {kafka: {bootstrap.servers: "127.0.0.1:9092"}}
        mirrors:
          - name: orders-back
            reverse-of: orders           # orders' topics and names, backwards (dr/failback.py)

Every mirror is validated on its own: one broken mirror does not hide the others (`load_entries`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from mirror_worker.config.librdkafka import consumer_settings, producer_settings, setting_value
from mirror_worker.config.model import MirrorConfig, build_mirror_config
from mirror_worker.config.posture import ALLOW_INSECURE_KEY, allowed_insecure
from mirror_worker.config.registry import check_registry_posture, registry_settings
from mirror_worker.config.unknown_keys import unknown_keys
from mirror_worker.exceptions import ConfigError

_TOP_KEYS = {"group-id-prefix", "groups"}
_GROUP_KEYS = {"name", "source", "sources", "destination", "settings", "mirrors"}
# allow-insecure: the weaknesses accepted for this cluster's Kafka and registry settings (config/posture.py).
# schema-registry: the registry's auth and TLS settings (config/registry.py), for its URL on the cluster or the mirror.
_REGISTRY_KEY = "schema-registry"
_SOURCE_KEYS = {"name", "kafka", "schema-registry-url", _REGISTRY_KEY, ALLOW_INSECURE_KEY}
_DESTINATION_KEYS = {"kafka", "schema-registry-url", _REGISTRY_KEY, "heartbeat-kafka", ALLOW_INSECURE_KEY}
_MIRROR_ONLY_KEYS = {"name", "enabled"}
# Airflow-only settings (a mirror's or group settings' `airflow:` mapping): validated by
# plugins/mirror_airflow/settings.py, ignored by the worker.
_AIRFLOW_KEY = "airflow"
# Spec keys that are not MirrorConfig fields under their snake_case name.
_RENAMED = {"topic-map": "topic_map", "group-id": "group_id"}
REVERSE_OF = "reverse-of"


@dataclass(frozen=True)
class SpecEntry:
    """One mirror of the spec: its config, or the error that made it invalid."""

    name: str
    group: str
    enabled: bool
    config: MirrorConfig | None
    error: str | None
    # The mirror's `airflow:` mapping as written (group settings' overlaid by the mirror's own keys), read
    # with the rest of the spec; the Airflow side validates it (mirror_airflow/settings.py), the worker never.
    airflow: object = field(default_factory=dict)


def read_spec(path: Path) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"spec file not found: {path}") from None
    except (PermissionError, IsADirectoryError, UnicodeDecodeError) as exc:
        raise ConfigError(f"spec file unreadable: {path}: {exc.__class__.__name__}") from None
    try:
        # libyaml's loader when PyYAML has it: a 100-mirror spec loads in ~1/5 of the pure-Python loader's time,
        # and every DAG file loads the spec.
        spec = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{line} invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: a mapping with `groups` is expected")
    _reject_unknown(spec, _TOP_KEYS, f"{path}")
    if not isinstance(spec.get("groups"), list) or not spec["groups"]:
        raise ConfigError(f"{path}: groups: a non-empty list is required")
    return spec


def load_entries(path: Path, only: str | None = None) -> list[SpecEntry]:
    """Every mirror of the spec, each validated on its own. File-level problems raise ConfigError.

    A mirror with `reverse-of: NAME` (failback) is built after NAME, from NAME's topics and naming; NAME then
    skips records that came from its destination (the reverse mirror's copies) instead of halting on them.

    `only`: just that mirror's entry (none when the spec has no such mirror), exactly as the whole load gives it,
    validating only the mirrors it depends on: its forward mirror, and the earlier mirrors naming the same
    consumer group (one of them may own it). A DAG file builds one mirror: with 100 mirrors validating the whole
    spec in each of 100 files made the dag-processor's work grow with the square of the mirrors (issue 42).
    """
    spec = read_spec(path)
    prefix = spec.get("group-id-prefix", "kafka-mirror.")
    raw: list[tuple[dict, object, str, str, bool]] = []
    seen: set[str] = set()
    for index, group in enumerate(spec["groups"]):
        if not isinstance(group, dict):
            raise ConfigError(f"{path}: groups[{index}]: a mapping is expected")
        group_name = str(group.get("name", f"groups[{index}]"))
        for mirror in group.get("mirrors") or []:
            name = str(mirror.get("name", "")) if isinstance(mirror, dict) else ""
            if name in seen:
                raise ConfigError(f"{path}: mirror {name or '?'!r}: the name is used twice")
            seen.add(name)
            enabled = mirror.get("enabled", True) if isinstance(mirror, dict) else False
            raw.append((group, mirror, name, group_name, enabled))
    if not raw:
        raise ConfigError(f"{path}: no mirrors defined")
    reversed_names = {str(m[REVERSE_OF]) for _, m, _, _, _ in raw if isinstance(m, dict) and m.get(REVERSE_OF)}
    wanted = None if only is None else _depends_on(raw, only, prefix)
    built: dict[str, SpecEntry] = {}
    for forward_pass in (True, False):
        for group, mirror, name, group_name, enabled in raw:
            is_reverse = isinstance(mirror, dict) and bool(mirror.get(REVERSE_OF))
            if is_reverse == forward_pass or (wanted is not None and name not in wanted):
                continue
            where = f"{path}: mirror {name or '?'!r}"
            try:
                if not isinstance(enabled, bool):  # a quoted "false" would count as enabled
                    enabled = True  # shown and refused as an invalid mirror, not silently skipped
                    raise ConfigError(f"{where}: enabled: must be true or false (a YAML boolean, unquoted)")
                if is_reverse:
                    mirror, derived = _reverse_mirror(mirror, built, where)
                else:
                    derived = {"origin-records": "skip"} if name in reversed_names else {}
                config = _mirror_config(group, mirror, prefix, where, derived)
                built[name] = SpecEntry(name, group_name, enabled, config, None, _airflow_section(group, mirror))
            except ConfigError as exc:
                built[name] = SpecEntry(name or "?", group_name, enabled, None, str(exc), _airflow_section(group, mirror))
    entries = _one_group_per_mirror([built[name] for _, _, name, _, _ in raw if name in built], path)
    return entries if only is None else [e for e in entries if e.name == only]


def _raw_group_id(mirror: object, prefix: str, name: str) -> str:
    """The consumer group a mirror's keys name, before validation (as _mirror_config sets it)."""
    given = mirror.get("group-id") if isinstance(mirror, dict) else None
    return str(given) if given else default_group_id(prefix, name)


def default_group_id(prefix: str, name: str) -> str:
    return f"{prefix}{name}"


def _depends_on(raw: list[tuple], only: str, prefix: str) -> set[str]:
    """The mirrors whose validation decides mirror `only`'s entry: itself, its forward mirror, and the mirrors
    before it in the spec that name the same consumer group (_one_group_per_mirror gives it to the first valid)."""
    names = [name for _, _, name, _, _ in raw]
    if only not in names:
        return set()
    position = names.index(only)
    mirror = raw[position][1]
    group = _raw_group_id(mirror, prefix, only)
    wanted = {only} | {name for _, m, name, _, _ in raw[:position] if _raw_group_id(m, prefix, name) == group}
    if isinstance(mirror, dict) and mirror.get(REVERSE_OF):
        wanted.add(str(mirror[REVERSE_OF]))
    return wanted


def _airflow_section(group: dict, mirror: object) -> object:
    """The group settings' `airflow:` overlaid by the mirror's own, key by key; a value that is not a
    mapping is kept as it is, for the Airflow side to refuse with the mirror named."""
    settings = group.get("settings") if isinstance(group.get("settings"), dict) else {}
    shared = settings.get(_AIRFLOW_KEY) or {}
    own = (mirror.get(_AIRFLOW_KEY) if isinstance(mirror, dict) else None) or {}
    if not isinstance(shared, dict):
        return shared
    if not isinstance(own, dict):
        return own
    return {**shared, **own}


def _one_group_per_mirror(entries: list[SpecEntry], path: Path) -> list[SpecEntry]:
    """A mirror whose consumer group an earlier mirror has becomes invalid: they would split its partitions."""
    owners: dict[str, str] = {}
    out = []
    for entry in entries:
        group = entry.config.group_id if entry.config is not None else None
        if group in owners:
            entry = SpecEntry(entry.name, entry.group, entry.enabled, None,
                              f"{path}: mirror {entry.name!r}: group-id: {group} is also mirror {owners[group]!r}'s "
                              "consumer group (one consumer group per mirror)", entry.airflow)
        elif group is not None:
            owners[group] = entry.name
        out.append(entry)
    return out


def _reverse_mirror(mirror: dict, built: dict[str, SpecEntry], where: str) -> tuple[dict, dict]:
    """A failback mirror's keys with `reverse-of` resolved to its forward mirror, and the defaults it derives
    from that mirror (the same partitioning, provenance headers, skipping the forward mirror's copies)."""
    forward_name = str(mirror[REVERSE_OF])
    forward = built.get(forward_name)
    if forward is None:
        raise ConfigError(f"{where}: reverse-of: no mirror named {forward_name!r}")
    if forward.config is None:
        raise ConfigError(f"{where}: reverse-of: mirror {forward_name!r} is invalid: {forward.error}")
    if forward.config.reverse_of is not None:
        raise ConfigError(f"{where}: reverse-of: mirror {forward_name!r} is itself a reverse mirror")
    fc = forward.config
    resolved = {**mirror, REVERSE_OF: {"name": fc.name, "whitelist": fc.whitelist, "blacklist": fc.blacklist,
                                       "prefix": fc.prefix, "topic_map": dict(fc.topic_map),
                                       "provenance_headers": fc.provenance_headers}}
    derived = {"preserve-partitions": fc.preserve_partitions, "preserve-order": fc.preserve_order,
               "provenance-headers": True, "origin-records": "skip"}
    return resolved, derived


def select_mirror(path: Path, name: str | None) -> MirrorConfig:
    entries = load_entries(path)
    if name is None:
        enabled = [e for e in entries if e.enabled]
        if len(enabled) != 1:
            names = ", ".join(e.name for e in enabled) or "none"
            raise ConfigError(f"{path}: --mirror NAME is required (enabled mirrors: {names})")
        entry = enabled[0]
    else:
        matches = [e for e in entries if e.name == name]
        if not matches:
            raise ConfigError(f"{path}: no mirror named {name!r} (have: {', '.join(e.name for e in entries)})")
        entry = matches[0]
        if not entry.enabled:
            raise ConfigError(f"{path}: mirror {name!r} is disabled (enabled: false)")
    if entry.error:
        raise ConfigError(entry.error)
    return entry.config


def _mirror_config(group: dict, mirror: dict, prefix: str, where: str, derived: dict | None = None) -> MirrorConfig:
    if not isinstance(mirror, dict):
        raise ConfigError(f"{where}: a mapping is expected")
    _reject_unknown(group, _GROUP_KEYS, f"{where}: group")
    settings = group.get("settings") or {}
    if not isinstance(settings, dict):
        raise ConfigError(f"{where}: group settings: a mapping is expected")
    if "group-id" in settings:
        raise ConfigError(f"{where}: group settings: group-id: every mirror of the group would share one consumer "
                          "group (partitions split between them): set group-id on each mirror, or group-id-prefix")
    # Derived defaults (failback pairs) give way to the group's settings and the mirror's own keys.
    merged = {**(derived or {}), **settings, **{k: v for k, v in mirror.items() if k not in _MIRROR_ONLY_KEYS}}
    merged.pop(_AIRFLOW_KEY, None)
    fields = {_field_name(k): v for k, v in merged.items()}
    if isinstance(fields.get("topic_creation"), dict):
        fields["topic_creation"] = {_field_name(k): v for k, v in fields["topic_creation"].items()}
    name = mirror.get("name")
    if not name:
        raise ConfigError(f"{where}: name: required")
    if "destination_schema_registry" in fields:  # its placeholders are resolved only where the cluster is
        raise ConfigError(f"{where}: destination-schema-registry: give it as the destination's {_REGISTRY_KEY}")

    raw_sources = group.get("sources")
    if raw_sources is None and group.get("source") is not None:
        raw_sources = [group["source"]]
    if not isinstance(raw_sources, list) or not raw_sources:
        raise ConfigError(f"{where}: source: required (a mapping with kafka settings)")
    sources = []
    for i, source in enumerate(raw_sources):
        _reject_unknown(source, _SOURCE_KEYS, f"{where}: source")
        source_name = str(source.get("name") or ("source" if len(raw_sources) == 1 else f"source{i}"))
        kafka = _client_dict(source.get("kafka"), f"{where}: source {source_name!r} kafka", source)
        registry = registry_settings(source.get(_REGISTRY_KEY), f"{where}: source {source_name!r} {_REGISTRY_KEY}")
        _check_registry(source.get("schema-registry-url"), registry, source,
                        f"{where}: source {source_name!r} schema-registry-url")
        if fields.get("schema_registry_url"):
            _check_registry(fields["schema_registry_url"], registry, source,
                            f"{where}: schema-registry-url (source {source_name!r})")
        if "group.id" in kafka:
            # The catch-up lease, the lag sensor, stop_mirror and failover all look for the mirror's group.
            raise ConfigError(f"{where}: source {source_name!r} kafka: group.id: the mirror's consumer group is its "
                              "group-id (default: group-id-prefix + its name): set that instead")
        consumer = consumer_settings(kafka, f"{where}: source {source_name!r} kafka", sized_by_round_trip=True)
        sources.append({"name": source_name, "consumer": consumer,
                        "schema_registry_url": source.get("schema-registry-url"), "schema_registry": registry})

    destination = group.get("destination")
    _reject_unknown(destination, _DESTINATION_KEYS, f"{where}: destination")
    # Unset: sized by the worker from the destination's round trip (config/inflight.py); the model checks a value.
    queue_size = int(fields["queue_size"]) if str(fields.get("queue_size", "")).isdigit() else None
    destination_registry = registry_settings(destination.get(_REGISTRY_KEY), f"{where}: destination {_REGISTRY_KEY}")
    _check_registry(destination.get("schema-registry-url"), destination_registry, destination,
                    f"{where}: destination schema-registry-url")
    _check_registry(fields.get("destination_schema_registry_url"), destination_registry, destination,
                    f"{where}: destination-schema-registry-url")
    producer = producer_settings(
        _client_dict(destination.get("kafka"), f"{where}: destination kafka", destination),
        f"{where}: destination kafka", queue_size,
        exactly_once=fields.get("delivery") == "exactly-once",
    )
    if destination.get("heartbeat-kafka"):
        fields["heartbeat_producer"] = producer_settings(
            _client_dict(destination["heartbeat-kafka"], f"{where}: destination heartbeat-kafka", destination),
            f"{where}: destination heartbeat-kafka", 1000,
        )
    fields.update(name=name, sources=sources, producer=producer)
    fields.setdefault("group_id", default_group_id(prefix, name))
    if destination.get("schema-registry-url"):
        fields["destination_schema_registry_url"] = destination["schema-registry-url"]
    if destination_registry:
        fields["destination_schema_registry"] = destination_registry
    return build_mirror_config(fields, where=where, key_style=_spec_key)


def _field_name(key: str) -> str:
    return _RENAMED.get(key, key.replace("-", "_"))


def _spec_key(field: str) -> str:
    """A model field as the spec spells it; dotted client keys stay as they are."""
    return field if "." in field else field.replace("_", "-")


def _client_dict(value, where: str, cluster: dict) -> dict[str, str]:
    """A kafka mapping as client settings, with its cluster's `allow-insecure` for the posture check."""
    if not isinstance(value, dict) or not value.get("bootstrap.servers"):
        raise ConfigError(f"{where}: bootstrap.servers is required")
    settings = {str(k): setting_value(v) for k, v in value.items() if k != ALLOW_INSECURE_KEY}
    opt_ins = _opt_ins(cluster, where) | allowed_insecure(value.get(ALLOW_INSECURE_KEY), where)
    if opt_ins:
        settings[ALLOW_INSECURE_KEY] = ",".join(sorted(opt_ins))
    return settings


def _opt_ins(cluster: dict, where: str) -> frozenset[str]:
    return allowed_insecure(cluster.get(ALLOW_INSECURE_KEY), where)


def _check_registry(url, settings: dict[str, str], cluster: dict, where: str) -> None:
    if isinstance(url, str):
        check_registry_posture(url, settings, _opt_ins(cluster, where), where)


def _reject_unknown(mapping, allowed: set[str], where: str) -> None:
    if not isinstance(mapping, dict):
        raise ConfigError(f"{where}: a mapping is expected")
    unknown = set(map(str, mapping)) - allowed
    if unknown:
        raise ConfigError(f"{where}: {unknown_keys(unknown, allowed)}")
