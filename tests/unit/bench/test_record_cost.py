"""bench.record_cost measures a queued record in a fresh process: at least its bytes, which librdkafka copies."""

from __future__ import annotations

import subprocess
import sys

from bench import record_cost


def test_a_queued_record_costs_at_least_the_bytes_librdkafka_copied():
    costs = {}
    for size in (100, 4096):
        out = subprocess.run([sys.executable, "-m", "bench.record_cost", "--records", "20000", "--one", str(size)],
                             check=True, capture_output=True, text=True).stdout
        costs[size] = float(out.strip().splitlines()[-1])
    assert costs[100] >= 100 and costs[4096] >= 4096
    # The same overhead beyond the bytes at both sizes (the message struct), within an allocator's rounding.
    assert abs((costs[4096] - 4096) - (costs[100] - 100)) < 100


def test_the_table_gives_the_cost_and_what_is_beyond_the_bytes():
    text = record_cost.table([(100, 180_000, 321.4), (1024, 180_000, 1249.0)])
    assert "| 100 | 180,000 | 321 | 221 |" in text and "| 1,024 | 180,000 | 1,249 | 225 |" in text
