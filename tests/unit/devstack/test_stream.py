"""The demo's slow live stream (devstack/stream.py) without servers: a round a second until stopped, a failed
round said and the next tried. tests/integration/test_quickstart.py watches the real one under `make run`."""

from __future__ import annotations

import threading

from devstack.stream import run


def test_the_stream_produces_a_round_each_interval_until_stopped():
    stop, rounds = threading.Event(), []

    def produce(count: int) -> None:
        rounds.append(count)
        if len(rounds) == 3:
            stop.set()

    assert run(produce, 2, stop, interval_s=0.01) == 3 and rounds == [2, 2, 2]


def test_a_failed_round_is_said_and_the_next_one_tried(capsys):
    stop, calls = threading.Event(), []

    def produce(count: int) -> None:
        calls.append(count)
        if len(calls) == 1:
            raise RuntimeError("broker restarting")
        stop.set()

    assert run(produce, 1, stop, interval_s=0.01) == 1 and len(calls) == 2
    assert "demo-stream: round not produced: broker restarting" in capsys.readouterr().err
