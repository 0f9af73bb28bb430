"""Topic ACL sync: which destination ACL bindings a mirror's source ACLs call for (pure; no broker).

As MirrorMaker 2's `sync.topic.acls.enabled`, but read-side only. For each ACL binding on a topic the
mirror mirrors, the destination topic (the mirror's naming policy) gets:

    source binding            destination binding
    ALLOW READ / DESCRIBE     the same
    ALLOW ALL                 ALLOW READ        (MM2's downgrade: ALL would grant writes)
    DENY READ / DESCRIBE      the same
    DENY ALL                  DENY READ
    anything else             nothing: WRITE never, nor CREATE, DELETE, ALTER, *_CONFIGS

MM2 copies every binding except ALLOW WRITE (so also ALLOW ALTER/DELETE, and DENY WRITE, which can
lock the mirror's own producer out of the destination). Here only the read side is copied, DENY included:
a source DENY that narrows a broader ALLOW (`User:*` may read, `User:contractor` may not) must travel with
it, or the destination would grant what the source refuses. For the same reason the principal filter
(include/exclude regexes over the full principal, `User:alice`) applies to ALLOW bindings only: a DENY
never grants anything. A PREFIXED or `*` DENY is expanded onto the mirrored topics it covers, one LITERAL
DENY per destination name (a prefix does not map through a naming policy; the names it covers do); a
PREFIXED or `*` ALLOW is not copied (leaving a grant out refuses, never grants). Nothing is ever deleted
from the destination.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from mirror_worker.dr.name_filter import NameFilter, compile_regexes

LITERAL, PREFIXED = "LITERAL", "PREFIXED"
ALLOW, DENY = "ALLOW", "DENY"
READ_SIDE = ("READ", "DESCRIBE")
WILDCARD_TOPIC = "*"


@dataclass(frozen=True, order=True)
class TopicAcl:
    """One ACL binding on a topic resource; operation and permission as Kafka names them (READ, ALLOW)."""

    topic: str
    principal: str
    host: str
    operation: str
    permission: str
    pattern: str = LITERAL

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SkippedAcl:
    acl: TopicAcl  # the source binding
    reason: str

    def to_dict(self) -> dict:
        return {**self.acl.to_dict(), "reason": self.reason}


@dataclass(frozen=True)
class PrincipalFilter(NameFilter):
    """Which principals' ALLOW bindings are copied: full matches of `include` (all when empty), minus `exclude`."""

    @classmethod
    def from_expressions(cls, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> "PrincipalFilter":
        return cls(compile_regexes(include, "acl-sync-principals"),
                   compile_regexes(exclude, "acl-sync-exclude-principals"))


@dataclass
class AclPlan:
    create: list[TopicAcl] = field(default_factory=list)   # destination bindings it lacks
    present: list[TopicAcl] = field(default_factory=list)  # destination bindings it already has
    skipped: list[SkippedAcl] = field(default_factory=list)


def destination_operation(acl: TopicAcl) -> str | None:
    """The operation the destination binding gets, None when the binding is not read-side."""
    if acl.operation in READ_SIDE:
        return acl.operation
    return "READ" if acl.operation == "ALL" else None


def covered_topics(acl: TopicAcl, mirrored: set[str]) -> list[str]:
    """The mirrored source topics a binding names: its topic, or for a DENY every one its pattern covers."""
    if acl.permission == DENY and acl.pattern == PREFIXED:
        return sorted(t for t in mirrored if t.startswith(acl.topic))
    if acl.permission == DENY and acl.pattern == LITERAL and acl.topic == WILDCARD_TOPIC:
        return sorted(mirrored)
    return [acl.topic] if acl.pattern == LITERAL and acl.topic in mirrored else []


def skip_reason(acl: TopicAcl, mirrored: set[str], principals: PrincipalFilter) -> str | None:
    """Why a source binding is not copied, None when it is."""
    if acl.pattern not in (LITERAL, PREFIXED):
        return f"{acl.pattern.lower()} pattern: not a topic binding's pattern"
    if acl.permission == ALLOW and acl.pattern != LITERAL:
        return f"{acl.pattern.lower()} pattern: only literal topic names map to destination topics"
    if acl.permission == ALLOW and acl.topic == WILDCARD_TOPIC:
        return "wildcard topic: it names every topic, not a mirrored one"
    if acl.permission not in (ALLOW, DENY):
        return f"permission {acl.permission}"
    if destination_operation(acl) is None:
        side = "write" if acl.operation in ("WRITE", "IDEMPOTENT_WRITE") else "not read"
        return f"operation {acl.operation} is {side}-side: never copied"
    if not covered_topics(acl, mirrored):
        return "prefixed pattern: no mirrored topic starts with it" if acl.pattern == PREFIXED else "topic not mirrored"
    if acl.permission == ALLOW and not principals.allows(acl.principal):
        return "principal excluded by the mirror's ACL filter"
    return None


def plan_acl_sync(source: Iterable[TopicAcl], mirrored: Iterable[str], remote_topic: Callable[[str], str],
                  principals: PrincipalFilter, destination: Iterable[TopicAcl]) -> AclPlan:
    """The destination bindings `source` calls for, split into those to create and those already there.

    `mirrored`: the source topics the mirror replicates; `remote_topic`: the mirror's naming policy;
    `destination`: the bindings the destination holds now (compared exactly: same topic, principal, host,
    operation and permission).
    """
    mirrored, existing = set(mirrored), set(destination)
    plan, wanted = AclPlan(), set()
    for acl in sorted(set(source)):
        reason = skip_reason(acl, mirrored, principals)
        if reason is not None:
            plan.skipped.append(SkippedAcl(acl, reason))
            continue
        for topic in covered_topics(acl, mirrored):
            target = TopicAcl(remote_topic(topic), acl.principal, acl.host, destination_operation(acl), acl.permission)
            if target in wanted:  # ALLOW ALL and ALLOW READ of one principal give one binding, as a DENY and its prefix's
                continue
            wanted.add(target)
            (plan.present if target in existing else plan.create).append(target)
    return plan
