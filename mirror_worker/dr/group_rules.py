"""Group offset sync: which destination group offsets a mirror writes (pure; no broker).

As MirrorMaker 2's `sync.group.offsets.enabled`, with the guarantees it lacks:

- the offset a group gets on the destination is the exact translation of its source commit
  (resume_search / resume_index: the first copy of a source offset >= C, or the offset sync without
  provenance headers);
- a destination offset only ever moves forward: a destination commit at or past the translation is left
  as it is (MM2 rewrites it whenever the group is empty);
- a group is written only while it is Empty or Dead (no member) on the destination: a consumer running
  there would overwrite the offsets, or read from a place moved under it (KAFKA-19794: MM2 rewound
  active groups);
- everything not written is reported with its reason;
- one writer per source cluster: of the processes of a mirror, only the member of the mirror's group that
  holds its first assigned source partition (the smallest topic and partition, as the source's coordinator
  says while the group is Stable) syncs; the others skip with the reason. Two processes' read-then-writes
  (each compares with the destination, then writes) could otherwise interleave and rewind a group.

Which groups: full matches of the include regexes (every group when none), minus the exclude regexes,
minus MM2's default exclusions (console consumers, Connect, internal `__` groups) and the mirror's own
consumer group.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from mirror_worker.dr.name_filter import NameFilter, compile_regexes

# As MirrorMaker 2's groups.exclude default: tools' and frameworks' groups are not an application's.
DEFAULT_EXCLUDES = ("console-consumer-.*", "connect-.*", "__.*")
WRITABLE_STATES = ("EMPTY", "DEAD")  # Dead: the group does not exist (yet) on the destination

# Reasons, as the report and the skipped counter's `reason` label name them.
GROUP_ACTIVE = "group-active"
DESTINATION_AHEAD = "destination-ahead"
UNTRANSLATED = "untranslated"
WRITE_FAILED = "write-failed"


@dataclass(frozen=True)
class GroupFilter:
    """Which source consumer groups are synced (see the module doc)."""

    names: NameFilter = NameFilter()
    own: frozenset[str] = frozenset()

    @classmethod
    def from_expressions(cls, include: Iterable[str] = (), exclude: Iterable[str] = (),
                         own: Iterable[str] = ()) -> "GroupFilter":
        return cls(NameFilter(compile_regexes(include, "group-offset-sync-groups"),
                              compile_regexes([*DEFAULT_EXCLUDES, *exclude], "group-offset-sync-exclude-groups")),
                   frozenset(own))

    def selects(self, group: str) -> bool:
        return group not in self.own and self.names.allows(group)


def blocking_state(state: str, members: int) -> str | None:
    """Why a destination group in `state` with `members` members must not be written; None when it may."""
    if state in WRITABLE_STATES and not members:
        return None
    return f"group is {state} with {members} active member(s) on the destination: a running consumer owns its offsets"


def not_writer_reason(state: str, assignments: dict[str, list[tuple[str, int]]], me: str | None) -> str | None:
    """Why this process does not sync groups now, None when it is the writer.

    `state`/`assignments`: the mirror's group on the source (member id -> its assigned partitions);
    `me`: this process's member id there (None or empty: not a member yet).
    """
    if state != "STABLE":
        return f"the mirror's group is {state} on the source: the writer is known once it is Stable"
    holders = {min(partitions): member for member, partitions in assignments.items() if partitions}
    if not holders:
        return "no member of the mirror's group holds a partition"
    first = min(holders)
    if holders[first] != me:
        return f"another member of the mirror's group holds its first partition {first[0]}[{first[1]}] and syncs"
    return None


@dataclass(frozen=True)
class Translation:
    """One committed source partition of a group, translated to its destination partition."""

    topic: str            # destination
    partition: int
    offset: int           # where the group resumes on the destination
    source_topic: str
    source_offset: int    # the group's commit on the source
    method: str           # resume_search: provenance, provenance-end, offset-sync
    may_reread: int


@dataclass(frozen=True)
class Untranslated:
    source_topic: str
    partition: int
    source_offset: int
    reason: str


@dataclass(frozen=True)
class PartitionOutcome:
    translation: Translation
    previous: int | None   # the destination group's commit before (None: none)
    reason: str = ""       # why not written (empty when written or unchanged)

    def to_dict(self) -> dict:
        return {**asdict(self.translation), "previous": self.previous, **({"reason": self.reason} if self.reason else {})}


@dataclass
class GroupPlan:
    group: str
    write: list[PartitionOutcome] = field(default_factory=list)
    unchanged: list[PartitionOutcome] = field(default_factory=list)   # already at the translation
    skipped: list[PartitionOutcome] = field(default_factory=list)     # with a reason (ahead, or the group active)
    untranslated: list[Untranslated] = field(default_factory=list)
    skip_codes: list[str] = field(default_factory=list)               # one reason code per skipped partition
    error: str | None = None                                           # the write failed: nothing was written

    def offsets(self) -> dict[tuple[str, int], int]:
        return {(o.translation.topic, o.translation.partition): o.translation.offset for o in self.write}

    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(self.skip_codes))


def moves_back(previous: int | None, offset: int) -> bool:
    """Writing `offset` would move a destination group back from `previous`, its commit there: after a failover
    the group consumes on the destination while the source's commits stay frozen, so a translation made again
    (a second run of the failover, the worker's group sync) is behind what it already read."""
    return previous is not None and previous > offset


def plan_group(group: str, translations: list[Translation], untranslated: list[Untranslated],
               current: dict[tuple[str, int], int], blocked: str | None) -> GroupPlan:
    """What to write to `group` on the destination.

    `current`: its committed offsets there now; `blocked`: blocking_state's reason (None: writable).
    A destination offset moves forward only: equal is unchanged, ahead is skipped and reported.
    """
    plan = GroupPlan(group, untranslated=list(untranslated))
    plan.skip_codes.extend(UNTRANSLATED for _ in untranslated)
    for translation in sorted(translations, key=lambda t: (t.topic, t.partition)):
        previous = current.get((translation.topic, translation.partition))
        if blocked is not None:
            plan.skipped.append(PartitionOutcome(translation, previous, blocked))
            plan.skip_codes.append(GROUP_ACTIVE)
        elif moves_back(previous, translation.offset):
            plan.skipped.append(PartitionOutcome(translation, previous, (
                f"destination offset {previous} is ahead of the translation {translation.offset}: never rewound")))
            plan.skip_codes.append(DESTINATION_AHEAD)
        elif previous == translation.offset:
            plan.unchanged.append(PartitionOutcome(translation, previous))
        else:
            plan.write.append(PartitionOutcome(translation, previous))
    return plan


def failed(plan: GroupPlan, error: str) -> None:
    """The write of `plan` was refused (a consumer joined since the describe, the cluster failed)."""
    plan.error = error
    plan.skipped.extend(PartitionOutcome(o.translation, o.previous, f"write failed: {error}") for o in plan.write)
    plan.skip_codes.extend(WRITE_FAILED for _ in plan.write)
    plan.write = []


@dataclass
class GroupSyncReport:
    """One sync of one source cluster's groups."""

    source: str
    dry_run: bool
    groups: list[GroupPlan] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # group ('*': the listing) -> why it was not synced
    not_writer: str | None = None  # why this process synced no group (another one writes)

    @property
    def ok(self) -> bool:
        return not self.errors and all(g.error is None for g in self.groups)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "groups": [{
                "group": g.group,
                "would_write" if self.dry_run else "written": [o.to_dict() for o in g.write],
                "unchanged": [o.to_dict() for o in g.unchanged],
                "skipped": [o.to_dict() for o in g.skipped],
                "untranslated": [asdict(u) for u in g.untranslated],
                **({"error": g.error} if g.error else {}),
            } for g in self.groups],
            "errors": [{"group": group, "error": error} for group, error in self.errors.items()],
            **({"not_writer": self.not_writer} if self.not_writer else {}),
        }
