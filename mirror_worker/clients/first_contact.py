"""The worker's first contact with its clusters: all of them in one bounded wait, which a stop ends.

The clusters used to be reached one after another, each with the whole start-up wait: with every cluster down,
the worker named only the first (the destination) after 30 s, and a Ctrl-C waited for the end of it. Here the
clients are asked in turn, a short slice each, until each answered or the wait is over; every cluster that did
not answer is named, one line each; a stop (SIGTERM, SIGINT) is seen between two slices.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from confluent_kafka import KafkaException

from mirror_worker.exceptions import ClusterRefusedError, StoppedBeforeStart, UnreachableClusterError

# A metadata request's slice: how late a stop is seen at most (the signal handler runs when the call returns).
# Reaching a cluster takes as long as it takes: librdkafka keeps connecting between the slices.
SLICE_S = 0.5


class Probe(NamedTuple):
    client: object  # anything with list_topics(timeout=) and poll(): an admin client or a consumer
    what: str  # the cluster in the error line: "destination", "source 'east'"
    cluster: str | None  # the name its client's error callback reports (ClientSettings.client's `cluster`)


def first_contact(probes: list[Probe], timeout_s: float, refused: Callable[[str | None], str | None],
                  stopping: Callable[[], bool], clock: Callable[[], float] = time.monotonic,
                  slice_s: float = SLICE_S) -> list[str]:
    """Each probe's cluster id, in order. `refused(cluster)`: why that cluster refused the connection
    (authentication, TLS), if it did: raised at once. Raises StoppedBeforeStart when `stopping()`, and
    UnreachableClusterError naming, one per line, every cluster that did not answer within `timeout_s`."""
    deadline = clock() + timeout_s
    ids: dict[int, str] = {}
    errors: dict[int, str] = {}
    while True:
        for index, probe in enumerate(probes):
            if index in ids:
                continue
            if stopping():
                raise StoppedBeforeStart(f"stopped while waiting for the {probe.what} cluster")
            try:
                ids[index] = probe.client.list_topics(timeout=max(0.1, min(slice_s, deadline - clock()))).cluster_id or ""
                continue
            except KafkaException as exc:
                errors[index] = exc.args[0].str()
            probe.client.poll(0)  # serves the error callback, which sees why the connection failed
            why = refused(probe.cluster)
            if why:
                raise ClusterRefusedError(f"{probe.what} cluster refused the connection: {why}")
        if len(ids) == len(probes):
            return [ids[i] for i in range(len(probes))]
        if clock() >= deadline:
            raise UnreachableClusterError("\n".join(
                f"{probe.what} cluster unreachable within {timeout_s:.0f}s: {errors[i]}"
                for i, probe in enumerate(probes) if i not in ids))
