"""How long to wait before asking a cluster again whether something it is doing is done (a new partition
served, a new topic visible or its config readable: topics/admin.py).

The first answer is usually a few milliseconds away: a broker serves a partition it just created within
milliseconds on loopback, and across a WAN the next question takes a round trip anyway. A fixed 200 ms pause
cost every start that created a topic 200 ms per creation (bench.wan's logs: 0.2 s of a 0.8 s start on
loopback); doubling from 10 ms waits as little at first and as long as before once a broker is slow (thousands
of partitions being made).
"""

from __future__ import annotations

from collections.abc import Iterator

FIRST_S = 0.01
LONGEST_S = 0.2


def pauses(first_s: float = FIRST_S, longest_s: float = LONGEST_S) -> Iterator[float]:
    """first_s, twice that, ... up to longest_s, then longest_s for ever."""
    pause = first_s
    while True:
        yield min(pause, longest_s)
        pause *= 2
