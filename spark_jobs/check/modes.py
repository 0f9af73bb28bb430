"""How the consistency check compares each topic: every record (`records`) or the latest value per key
(`compacted`, spark_jobs/check/compacted.py).

`--mode auto` (the default) decides per source topic from its `cleanup.policy`: a policy that includes
`compact` (`compact`, `compact,delete`) means the topic is compacted, so the source and the destination drop
older versions of a key on their own schedules and only the latest value per key can be compared; any other
policy compares every record. The policy is read as the worker's config sync reads it
(mirror_worker/topics/configs.py): the configs set on the topic itself. A topic without its own
`cleanup.policy` follows its broker's default (`delete` unless the brokers' `log.cleanup.policy` says
otherwise) and is checked record by record. `--mode records` and `--mode compacted` force one mode for all.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror_worker.batch_api import TopicConfigs, describe_explicit_configs

AUTO, RECORDS, COMPACTED = "auto", "records", "compacted"
MODES = (AUTO, RECORDS, COMPACTED)


@dataclass(frozen=True)
class TopicMode:
    mode: str    # RECORDS or COMPACTED
    reason: str  # why, for the report

    def summary(self) -> dict:
        return {"mode": self.mode, "reason": self.reason}


def choose_modes(requested: str, topics: list[str], configs: dict[str, TopicConfigs] | None = None,
                 ) -> dict[str, TopicMode]:
    """{source topic: its mode}. `configs` ({topic: configs set on the topic}) is only read for AUTO; a topic
    missing from it had configs that could not be read."""
    if requested != AUTO:
        return {t: TopicMode(requested, f"--mode {requested}") for t in topics}
    return {t: _by_cleanup_policy(configs.get(t) if configs else None) for t in topics}


def _by_cleanup_policy(configs: TopicConfigs | None) -> TopicMode:
    if configs is None:
        return TopicMode(RECORDS, "topic configs not readable: every record")
    policy = configs.get("cleanup.policy")
    if policy is None:
        return TopicMode(RECORDS, "cleanup.policy not set on the topic (the broker's default): every record")
    if "compact" in {p.strip() for p in policy.split(",")}:
        return TopicMode(COMPACTED, f"cleanup.policy={policy} set on the topic: the latest value per key")
    return TopicMode(RECORDS, f"cleanup.policy={policy} set on the topic: every record")


def topic_modes(admin, requested: str, topics: list[str], timeout: float) -> dict[str, TopicMode]:
    """choose_modes with the topics' configs read from the source cluster (only for AUTO)."""
    configs = describe_explicit_configs(admin, topics, timeout) if requested == AUTO else None
    return choose_modes(requested, topics, configs)
