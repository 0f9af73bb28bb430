"""Burrow-style evaluation of a mirror's consumer lag: pure rules over a window of samples.

A sample is one measurement of one source partition: when it was taken, the mirror group's committed
offset (the next record to mirror) and the partition's low/high watermarks. Each rule is a free function
of a partition's window (oldest first), `now` and the mirror's `Limits`; it returns the reason it fires,
or None. `evaluate` applies every rule to every partition, adds the heartbeat checks of each source and
returns the worst status with its reasons.

    OK          nothing fires
    WARN        the lag never shrinks over the window (it may still be small): a warning, not a failure
    REWIND      a committed offset went backwards
    LAG         the latest lag exceeds max-lag-records
    LATENCY     the newest heartbeat is older than max-latency-seconds, or there is none
    SKEW        the newest heartbeat is stamped more than max-clock-skew-seconds ahead of the sensor's clock:
                its age cannot be judged (a clock from the future would hide a dead mirror)
    STALL       the committed offset did not move over the whole window while lag stayed above allowed-lag
    STOP        commits stopped: the offset has not moved for stop-after-seconds while there is lag
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

PartitionKey = tuple[str, str, int]  # (source alias, topic, partition)


class Status(str, Enum):
    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    LAG = "LAG"
    LATENCY = "LATENCY"
    SKEW = "SKEW"
    STALL = "STALL"
    STOP = "STOP"

    @property
    def severity(self) -> int:
        return list(Status).index(self)

    @property
    def failing(self) -> bool:
        return self.severity > Status.WARN.severity


@dataclass(frozen=True)
class Sample:
    time: float  # seconds since the epoch
    committed: int | None  # None: the group has never committed this partition
    high: int
    low: int = 0

    @property
    def lag(self) -> int:
        # Before the first commit the worker starts at the log start (auto.offset.reset=earliest); a
        # committed offset below the log start was overtaken by retention and resumes there too.
        position = self.low if self.committed is None else max(self.committed, self.low)
        return max(0, self.high - position)


@dataclass(frozen=True)
class Limits:
    allowed_lag: int = 0
    stop_after_s: float = 120.0
    max_lag_records: int | None = None
    max_latency_s: float | None = None
    max_clock_skew_s: float = 60.0


@dataclass(frozen=True)
class Heartbeat:
    """One worker's newest heartbeat record (by offset) for one source, read back from the destination."""

    worker: str  # "host:pid" as the record names it
    offset: int  # its place in the heartbeat topic: the latest by offset was written last, whatever it is stamped
    worker_time: float  # the worker's wall clock when it sent the record (epoch seconds)
    broker_time: float | None = None  # the destination broker's append time (a LogAppendTime topic), else None

    @property
    def time(self) -> float:
        # The broker's stamp when there is one: the age then rests on the destination broker's clock and the
        # sensor's (one pair, usually both NTP-kept servers), and the worker's clock drops out.
        return self.worker_time if self.broker_time is None else self.broker_time

    @property
    def clock(self) -> str:
        return "the destination broker" if self.broker_time is not None else f"worker {self.worker}"


def newest_heartbeat(beats: Sequence[Heartbeat]) -> Heartbeat | None:
    """The heartbeat written last. By offset, not by stamp: one stamp from the future must not mask the
    later ones (a worker whose clock ran ahead and then died, or was corrected)."""
    return max(beats, key=lambda b: b.offset, default=None)


Rule = Callable[[Sequence[Sample], float, Limits], "str | None"]


def rule_rewind(window: Sequence[Sample], now: float, limits: Limits) -> str | None:
    for before, after in zip(window, window[1:]):
        if before.committed is not None and after.committed is not None and after.committed < before.committed:
            return f"committed offset went back from {before.committed} to {after.committed}"
    return None


def rule_stall(window: Sequence[Sample], now: float, limits: Limits) -> str | None:
    if len(window) < 2:
        return None
    if len({s.committed for s in window}) == 1 and all(s.lag > limits.allowed_lag for s in window):
        span = window[-1].time - window[0].time
        return (f"committed offset stayed at {window[-1].committed} for {span:.0f}s with lag "
                f"{window[0].lag}..{window[-1].lag} > allowed {limits.allowed_lag}")
    return None


def rule_stop(window: Sequence[Sample], now: float, limits: Limits) -> str | None:
    if not window or window[-1].lag == 0:
        return None
    # The trailing run of samples at the current offset, all with lag: the offset has not moved since
    # (at least) the first of them, and there was always something to mirror.
    since = window[-1].time
    for sample in reversed(window):
        if sample.committed != window[-1].committed or sample.lag == 0:
            break
        since = sample.time
    idle = now - since
    if idle >= limits.stop_after_s:
        return f"no commit for {idle:.0f}s (>= {limits.stop_after_s:g}s) with lag {window[-1].lag}"
    return None


def rule_warn(window: Sequence[Sample], now: float, limits: Limits) -> str | None:
    if len(window) < 2:
        return None
    lags = [s.lag for s in window]
    if all(lag > 0 for lag in lags) and all(b >= a for a, b in zip(lags, lags[1:])) \
            and lags[-1] > limits.allowed_lag:
        return f"lag never shrank over the window ({lags[0]} -> {lags[-1]})"
    return None


def rule_max_lag(window: Sequence[Sample], now: float, limits: Limits) -> str | None:
    if window and limits.max_lag_records is not None and window[-1].lag > limits.max_lag_records:
        return f"lag {window[-1].lag} > max {limits.max_lag_records} records"
    return None


def latency_reason(beats: Sequence[Heartbeat], now: float, limits: Limits) -> tuple[Status, str] | None:
    """The LATENCY (or SKEW) rule of one source over its workers' newest heartbeats (none: empty)."""
    if limits.max_latency_s is None:
        return None
    newest = newest_heartbeat(beats)
    if newest is None:
        return Status.LATENCY, "no recent heartbeat"
    ahead = newest.time - now
    if ahead > limits.max_clock_skew_s:
        return Status.SKEW, (f"newest heartbeat stamped {ahead:.0f}s ahead of the sensor's clock by {newest.clock} "
                             f"(> {limits.max_clock_skew_s:g}s allowed): its age cannot be judged")
    latency = now - newest.time
    if latency > limits.max_latency_s:
        trusted = "" if newest.broker_time is not None else \
            f" (by worker {newest.worker}'s clock: the heartbeat topic is not LogAppendTime)"
        return Status.LATENCY, f"replication latency {latency:.0f}s > max {limits.max_latency_s:g}s{trusted}"
    return None


def worker_clock_reasons(heartbeats: Mapping[str, Sequence[Heartbeat]], limits: Limits) -> dict[str, str]:
    """Per worker whose stamp differs from the broker's append time by more than max-clock-skew-seconds: why.
    A WARN only: with broker stamps the ages do not use the worker's clock, so a skewed worker must not page
    (a clock behind would otherwise page for as long as it stays behind)."""
    newest: dict[str, Heartbeat] = {}
    for beats in heartbeats.values():
        for beat in beats:
            if beat.broker_time is not None and (beat.worker not in newest or beat.offset > newest[beat.worker].offset):
                newest[beat.worker] = beat
    reasons = {}
    for worker, beat in sorted(newest.items()):
        skew = beat.worker_time - beat.broker_time
        if abs(skew) > limits.max_clock_skew_s:
            # Behind may also be a heartbeat that waited in the producer (a broker outage); ahead is only the clock.
            side = "ahead of" if skew > 0 else "behind"
            reasons[worker] = (f"clock {abs(skew):.0f}s {side} the destination broker's "
                               f"(> {limits.max_clock_skew_s:g}s); heartbeat ages use the broker's time")
    return reasons


PARTITION_RULES: dict[Status, Rule] = {
    Status.WARN: rule_warn,
    Status.REWIND: rule_rewind,
    Status.LAG: rule_max_lag,
    Status.STALL: rule_stall,
    Status.STOP: rule_stop,
}


@dataclass(frozen=True)
class Finding:
    where: str  # "source/topic/partition", "source" for latency, "worker host:pid" for its clock
    status: Status
    reasons: tuple[str, ...]
    lag: int | None = None


@dataclass(frozen=True)
class Evaluation:
    status: Status
    findings: tuple[Finding, ...] = field(default_factory=tuple)  # worst first; OK ones left out

    def summary(self, limit: int = 3) -> str:
        """One line: the status and the worst findings."""
        if not self.findings:
            return self.status.value
        shown = "; ".join(f"{f.where} {f.status.value}: {f.reasons[0]}" for f in self.findings[:limit])
        more = len(self.findings) - limit
        return f"{self.status.value}: {shown}" + (f" (+{more} more)" if more > 0 else "")


def evaluate_partition(window: Sequence[Sample], now: float, limits: Limits) -> tuple[Status, tuple[str, ...]]:
    fired = {status: reason for status, rule in PARTITION_RULES.items() if (reason := rule(window, now, limits))}
    if not fired:
        return Status.OK, ()
    worst = max(fired, key=lambda s: s.severity)
    ordered = sorted(fired, key=lambda s: -s.severity)
    return worst, tuple(f"{fired[s]}" if s is worst else f"{s.value}: {fired[s]}" for s in ordered)


def evaluate(
    windows: Mapping[PartitionKey, Sequence[Sample]],
    heartbeats: Mapping[str, Sequence[Heartbeat]],
    now: float,
    limits: Limits,
) -> Evaluation:
    """The worst status over every partition's window and every source's heartbeats (each worker's newest)."""
    findings: list[Finding] = []
    for (source, topic, partition), window in windows.items():
        status, reasons = evaluate_partition(window, now, limits)
        if status is not Status.OK:
            findings.append(Finding(f"{source}/{topic}/{partition}", status, reasons, window[-1].lag))
    for source, beats in heartbeats.items():
        if fired := latency_reason(beats, now, limits):
            findings.append(Finding(source, fired[0], (fired[1],)))
    for worker, reason in worker_clock_reasons(heartbeats, limits).items():
        findings.append(Finding(f"worker {worker}", Status.WARN, (reason,)))
    findings.sort(key=lambda f: (-f.status.severity, -(f.lag or 0), f.where))
    worst = findings[0].status if findings else Status.OK
    return Evaluation(worst, tuple(findings))


# Sliding window bookkeeping ------------------------------------------------------------------------


def merge_windows(
    windows: Mapping[PartitionKey, Sequence[Sample]],
    samples: Iterable[tuple[PartitionKey, Sample]],
    now: float,
    window_s: float,
) -> dict[PartitionKey, list[Sample]]:
    """Add new samples and drop the old: each window keeps its samples of the last `window_s` seconds
    plus the newest one before that (so a covered window spans at least `window_s`) unless that one is
    older than two windows (a gap in sampling, e.g. a paused DAG: the window must fill again). Partitions
    no longer measured drop out once their samples are older than the window."""
    merged: dict[PartitionKey, list[Sample]] = {key: list(window) for key, window in windows.items()}
    for key, sample in samples:
        merged.setdefault(key, []).append(sample)
    start = now - window_s
    out = {}
    for key, window in merged.items():
        window.sort(key=lambda s: s.time)
        older = [s for s in window if start - window_s <= s.time < start]
        recent = [s for s in window if s.time >= start]
        kept = older[-1:] + recent
        if recent:
            out[key] = kept
    return out


def covers(windows: Mapping[PartitionKey, Sequence[Sample]], now: float, window_s: float) -> bool:
    """True when the history reaches back `window_s` seconds. A partition that appeared since (a new
    topic) is judged on the shorter history it has; rules over too few samples do not fire."""
    return not windows or min(w[0].time for w in windows.values() if w) <= now - window_s
