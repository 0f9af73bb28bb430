"""Topic ACL sync, the admin edge: read source and destination topic ACLs, create what the plan says.

The choice of bindings is `acl_sync.plan_acl_sync` (pure). `AclSync` holds the destination admin, the
naming policy and the principal filter; the worker calls it per source stream every
`acl-sync-interval-ms` (engine/topic_management.py), the `sync-acls` command once (`sync_mirror_acls`).
Creating a binding the destination already has is a no-op in Kafka, so a race with another worker is harmless.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, ResourceType,
)

from mirror_worker.clients import factory
from mirror_worker.config.model import MirrorConfig
from mirror_worker.dr.acl_rules import DENY, PrincipalFilter, SkippedAcl, TopicAcl, plan_acl_sync
from mirror_worker.exceptions import MirrorError

log = logging.getLogger("mirror_worker")

# Every binding on a topic resource, whatever its pattern, principal, host, operation and permission.
TOPIC_ACLS = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


class AclSyncError(MirrorError):
    """ACLs could not be read (no authorizer, not authorized, cluster unreachable)."""


def to_topic_acl(binding: AclBinding) -> TopicAcl:
    return TopicAcl(binding.name, binding.principal, binding.host, binding.operation.name,
                    binding.permission_type.name, binding.resource_pattern_type.name)


def to_binding(acl: TopicAcl) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, acl.topic, ResourcePatternType[acl.pattern], acl.principal, acl.host,
                      AclOperation[acl.operation], AclPermissionType[acl.permission])


def describe_topic_acls(admin, what: str, timeout: float = 30.0) -> list[TopicAcl]:
    try:
        bindings = admin.describe_acls(TOPIC_ACLS, request_timeout=timeout).result(timeout)
    except (KafkaException, TimeoutError) as exc:
        raise AclSyncError(f"{what}: topic ACLs not readable: {_error_text(exc)}") from None
    return [to_topic_acl(b) for b in bindings if b.restype == ResourceType.TOPIC]


def create_acls(admin, acls: list[TopicAcl], timeout: float = 30.0) -> dict[TopicAcl, str]:
    """create_acls; returns {binding: error} of the bindings the destination refused."""
    if not acls:
        return {}
    by_binding = {to_binding(a): a for a in acls}
    errors = {}
    for binding, future in admin.create_acls(list(by_binding), request_timeout=timeout).items():
        try:
            future.result(timeout)
        except (KafkaException, TimeoutError) as exc:
            errors[by_binding[binding]] = _error_text(exc)
    return errors


def _error_text(exc: Exception) -> str:
    if isinstance(exc, KafkaException) and exc.args and hasattr(exc.args[0], "str"):
        return exc.args[0].str()
    return f"no answer ({exc.__class__.__name__})"


@dataclass
class AclSyncReport:
    source: str
    dry_run: bool
    created: list[TopicAcl] = field(default_factory=list)  # dry run: what would be created
    present: list[TopicAcl] = field(default_factory=list)
    skipped: list[SkippedAcl] = field(default_factory=list)
    errors: dict[TopicAcl, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skipped))

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "would_create" if self.dry_run else "created": [a.to_dict() for a in self.created],
            "present": [a.to_dict() for a in self.present],
            "skipped": [s.to_dict() for s in self.skipped],
            "errors": [{**a.to_dict(), "error": e} for a, e in self.errors.items()],
        }


class AclSync:
    """Copies one source's read-side topic ACLs to the destination (see dr/acl_rules.py for which)."""

    def __init__(self, destination_admin, remote_topic: Callable[[str], str], principals: PrincipalFilter,
                 timeout: float = 30.0) -> None:
        self.destination_admin = destination_admin
        self.remote_topic = remote_topic
        self.principals = principals
        self.timeout = timeout

    def sync(self, source: str, source_admin, mirrored: list[str], dry_run: bool = False) -> AclSyncReport:
        """Raises AclSyncError when either side's ACLs cannot be read; refused creations are in the report."""
        source_acls = describe_topic_acls(source_admin, f"source {source!r}", self.timeout)
        destination_acls = describe_topic_acls(self.destination_admin, "destination", self.timeout)
        plan = plan_acl_sync(source_acls, mirrored, self.remote_topic, self.principals, destination_acls)
        report = AclSyncReport(source, dry_run, present=plan.present, skipped=plan.skipped)
        errors = {} if dry_run else self.create_denies_first(plan.create)
        report.created = [a for a in plan.create if a not in errors]
        report.errors = errors
        return report

    def create_denies_first(self, acls: list[TopicAcl]) -> dict[TopicAcl, str]:
        """Creates the DENYs, then the ALLOWs of the destination topics whose DENYs all exist: an ALLOW is
        never on the destination without the DENYs that narrow it."""
        denies = [a for a in acls if a.permission == DENY]
        errors = create_acls(self.destination_admin, denies, self.timeout)
        refused = {a.topic for a in errors}
        allows = [a for a in acls if a.permission != DENY]
        errors.update({a: "not created: a DENY on this topic was refused" for a in allows if a.topic in refused})
        errors.update(create_acls(self.destination_admin, [a for a in allows if a.topic not in refused], self.timeout))
        return errors


def log_report(report: AclSyncReport, label: dict) -> None:
    labels = {**label, "source": report.source}
    for acl in report.created:
        log.info("topic ACL would be created" if report.dry_run else "topic ACL created",
                 extra={**labels, **acl.to_dict()})
    for acl, error in report.errors.items():
        log.warning("topic ACL not created", extra={**labels, **acl.to_dict(), "error": error})
    log.info("topic ACLs synced", extra={
        # "created" is a LogRecord attribute: the counts take an acls_ prefix.
        **labels, "dry_run": report.dry_run, "acls_created": len(report.created), "acls_present": len(report.present),
        "acls_failed": len(report.errors), "acls_skipped": report.skipped_by_reason(),
    })


def principal_filter(config: MirrorConfig) -> PrincipalFilter:
    return PrincipalFilter.from_expressions(config.acl_sync_principals, config.acl_sync_exclude_principals)


def worker_acl_sync(config: MirrorConfig, destination_admin, remote_topic: Callable[[str], str]) -> AclSync | None:
    """The worker's AclSync (its admin, its routing's naming policy); None when acl-sync-interval-ms is 0."""
    if not config.acl_sync_interval_ms:
        return None
    return AclSync(destination_admin, remote_topic, principal_filter(config), config.startup_timeout_s)


def _admin(settings: dict) -> AdminClient:
    # librdkafka's own lines go to the structured log: stderr carries only the command's one-line error.
    return factory.admin_client(settings)


def sync_mirror_acls(config: MirrorConfig, dry_run: bool = False, timeout: float = 30.0) -> list[AclSyncReport]:
    """One sync of every source of the mirror (the `sync-acls` command): the topics the mirror selects now."""
    destination = _admin(config.producer)
    acl_sync = AclSync(destination, config.naming_policy().remote_topic, principal_filter(config), timeout)
    topic_filter = config.topic_filter()
    reports = []
    for source in config.sources:
        admin = _admin(source.consumer)
        try:
            topics = admin.list_topics(timeout=timeout).topics
        except KafkaException as exc:
            raise AclSyncError(f"source {source.name!r}: topics not listed: {_error_text(exc)}") from None
        report = acl_sync.sync(source.name, admin, topic_filter.select(topics), dry_run)
        log_report(report, {"mirror": config.name})
        reports.append(report)
    return reports
