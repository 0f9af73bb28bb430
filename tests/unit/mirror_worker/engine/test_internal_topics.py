"""The worker's own destination topics, named in one place for the one call that makes them at start
(engine/topic_management.py internal_topics; topics/admin.py ensure_internal)."""

from __future__ import annotations

from types import SimpleNamespace

from mirror_worker.engine.topic_management import internal_topics


def _config(**overrides):
    base = dict(exactly_once=False, positions_topic="m.mirror.eos-positions", writes_offset_syncs=True,
                offset_syncs_topic="m.mirror.offset-syncs", heartbeat_topic="mirror.heartbeats", dead_letter_topic=None)
    return SimpleNamespace(**{**base, **overrides})


def test_at_least_once_makes_the_offset_syncs_and_the_heartbeats_with_their_configs():
    assert internal_topics(_config()) == {
        "m.mirror.offset-syncs": {"cleanup.policy": "compact"},
        "mirror.heartbeats": {"message.timestamp.type": "LogAppendTime"},
    }


def test_exactly_once_adds_its_positions_and_a_dead_letter_topic_comes_without_a_config():
    topics = internal_topics(_config(exactly_once=True, dead_letter_topic="m.dead", writes_offset_syncs=False))
    assert topics == {
        "m.mirror.eos-positions": {"cleanup.policy": "compact"},
        "mirror.heartbeats": {"message.timestamp.type": "LogAppendTime"},
        "m.dead": {},
    }
