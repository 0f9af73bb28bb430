"""Start-position decisions (data-loss detection), without a broker."""

from __future__ import annotations

import pytest

from mirror_worker.engine.data_loss import Verdict, decide_start

# position, position's topic id, topic id now, low, high, reset to earliest -> verdict, start offset
CASES = [
    (None, None, "A", 0, 10, True, Verdict.FRESH, 0),
    (None, None, "A", 5, 10, False, Verdict.FRESH, 10),
    (5, "A", "A", 0, 10, True, Verdict.RESUME, 5),
    (0, "A", "A", 0, 10, True, Verdict.RESUME, 0),       # low edge: nothing deleted yet
    (10, "A", "A", 0, 10, True, Verdict.RESUME, 10),     # high edge: caught up
    (4, "A", "A", 5, 10, True, Verdict.TRUNCATED, 5),    # off by one: offset 4 is gone
    (11, "A", "A", 0, 10, True, Verdict.BEYOND_END, 0),
    (5, "A", "B", 0, 10, True, Verdict.RECREATED, 0),    # offsets look fine, the topic is another one
    (5, "", "B", 0, 10, True, Verdict.RESUME, 5),        # commits from before ids were kept
    (5, "A", None, 0, 10, True, Verdict.RESUME, 5),
]


@pytest.mark.parametrize("position,position_id,topic_id,low,high,earliest,verdict,start", CASES)
def test_decide_start(position, position_id, topic_id, low, high, earliest, verdict, start):
    decision = decide_start(position, position_id, topic_id, low, high, earliest, "t[0]")
    assert (decision.verdict, decision.offset) == (verdict, start)
    assert decision.lost == (verdict in (Verdict.TRUNCATED, Verdict.BEYOND_END, Verdict.RECREATED))
    assert bool(decision.reason) == decision.lost


def test_truncation_reason_names_the_lost_range():
    decision = decide_start(100, "A", "A", 150, 200, True, "orders[3]")
    assert decision.reason == ("orders[3]: records 100..149 were deleted from the source (retention) before they "
                               "were mirrored; earliest offset now 150")
