"""How the worker (and the catch-up's tasks) take records from a consumer: never waiting for a batch to fill."""

from __future__ import annotations


def take_available(consumer, limit: int, timeout: float) -> list:
    """What the consumer already holds (up to `limit`), waiting up to `timeout` only while it holds nothing.

    `consume(limit, timeout)` waits until `limit` records arrived or the timeout ended: at ordinary rates
    every record would wait for the batch to fill (10,000 msgs/s and a batch of 2,500: up to 250 ms).
    Big batches still come from high rates, when the prefetch queue holds them already.
    """
    batch = consumer.consume(limit, 0)
    if batch:
        return batch
    batch = consumer.consume(1, timeout)  # returns as soon as one record (or event) is there
    if batch and limit > 1:
        batch += consumer.consume(limit - 1, 0)
    return batch
