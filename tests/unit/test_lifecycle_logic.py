"""Pure logic behind partition growth, exactly-once position keep-alive and bounded shutdown (issue #17 f, h, i)."""

from __future__ import annotations

import pytest

from mirror_worker.topics import TopicInfo, outgrown_topics


@pytest.mark.parametrize("assigned, expected", [
    ([], set()),
    ([("a", 0), ("a", 1)], set()),
    ([("a", 2)], {"a"}),
    ([("a", 0), ("b", 5)], {"b"}),
    ([("unknown", 9)], set()),  # not mirrored yet: the next refresh creates its destination topic
])
def test_outgrown_topics_are_those_assigned_a_partition_beyond_their_known_count(assigned, expected):
    known = {"a": TopicInfo("a", 2, 1), "b": TopicInfo("b", 5, 1)}
    assert outgrown_topics(assigned, known) == expected
