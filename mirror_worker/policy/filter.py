"""Which source topics a mirror replicates: a whitelist or a blacklist regex, never internal topics."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from mirror_worker.exceptions import ConfigError

# Kafka's own and Streams/Connect internals, and the mirror's own bookkeeping topics.
INTERNAL_TOPIC_PATTERNS = (r"__.*", r".*[-.]internal", r"mirror\.heartbeats", r".*\.mirror\.offset-syncs",
                           r".*\.mirror\.eos-positions")
_INTERNAL = re.compile("|".join(f"(?:{p})" for p in INTERNAL_TOPIC_PATTERNS))


# A repetition with a comma ({1,2}, {2,}, {,3}): split at the comma it would select nothing, silently.
_COMMA_QUANTIFIER = re.compile(r"(?<!\\)\{\d*,\d*\}")


def compile_topic_regex(expression: str, flag: str) -> re.Pattern:
    """MirrorMaker's list syntax: a Java regex where a comma means `|`; matched against whole names."""
    if not expression or not expression.strip():
        raise ConfigError(f"{flag}: must not be empty")
    if quantifier := _COMMA_QUANTIFIER.search(expression):
        raise ConfigError(f"{flag}: the comma in {quantifier.group()} would split the regex in two (a comma means |, "
                          "as in MirrorMaker): write the repetition without one, e.g. [0-9][0-9]? for [0-9]{1,2}")
    # Commas separate alternatives, as in MirrorMaker (and Kafka topic names cannot contain one).
    expression = "|".join(part.strip() for part in expression.split(","))
    try:
        return re.compile(expression)
    except re.error as exc:
        raise ConfigError(f"{flag}: invalid regex {expression!r}: {exc}") from None


@dataclass(frozen=True)
class TopicFilter:
    whitelist: re.Pattern | None = None
    blacklist: re.Pattern | None = None

    def __post_init__(self) -> None:
        if (self.whitelist is None) == (self.blacklist is None):
            raise ConfigError("exactly one of --whitelist and --blacklist is required")

    @classmethod
    def from_expressions(cls, whitelist: str | None, blacklist: str | None) -> "TopicFilter":
        if (whitelist is None) == (blacklist is None):
            raise ConfigError("exactly one of --whitelist and --blacklist is required")
        if whitelist is not None:
            return cls(whitelist=compile_topic_regex(whitelist, "whitelist"))
        return cls(blacklist=compile_topic_regex(blacklist, "blacklist"))

    def should_replicate(self, topic: str) -> bool:
        if is_internal_topic(topic):
            return False
        if self.whitelist is not None:
            return self.whitelist.fullmatch(topic) is not None
        return self.blacklist.fullmatch(topic) is None

    def select(self, topics) -> list[str]:
        return sorted(t for t in topics if self.should_replicate(t))


def is_internal_topic(topic: str) -> bool:
    return _INTERNAL.fullmatch(topic) is not None


@dataclass(frozen=True)
class ReverseTopicFilter:
    """A reverse (failback) mirror's topics: the forward mirror's destination names of the topics it selects.

    `upstream(name)` is the forward naming policy's inverse (None for a name the forward mirror never makes).
    """

    forward: TopicFilter
    upstream: Callable[[str], str | None]

    def should_replicate(self, topic: str) -> bool:
        if is_internal_topic(topic):
            return False
        upstream = self.upstream(topic)
        return upstream is not None and self.forward.should_replicate(upstream)

    def select(self, topics) -> list[str]:
        return sorted(t for t in topics if self.should_replicate(t))
