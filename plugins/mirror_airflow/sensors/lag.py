"""MirrorLagSensor: measures a mirror's per-partition lag and heartbeat latency and judges a sliding window.

The window lives across runs in the Airflow Variable `mirror_lag_window__<mirror>` (the lag DAG runs
every minute with max_active_runs=1, so one run writes it at a time): each run adds one sample per
partition and judges the last `window_s` seconds at once. When there is not enough history (first run,
or after a pause longer than the window) the sensor defers to `MirrorLagTrigger`, which samples in the
triggerer until the window is covered, so no worker slot is held while waiting. With deferrable=False
it pokes in reschedule mode instead, keeping the samples in the same Variable.

A failing status (see lag_rules) fails the task with `LagCheckFailed`, whose one-line message names the
worst partitions; the DAG's on_failure_callback notifiers send it. OK (and WARN, unless fail_on_warn)
passes, logging the findings.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

from airflow.sdk import BaseSensorOperator, Variable
from airflow.sdk.exceptions import AirflowException

from mirror_airflow.lag.rules import (
    Evaluation, Limits, PartitionKey, Sample, Status, covers, evaluate, merge_windows, newest_heartbeat,
)
from mirror_airflow.triggers.lag import MirrorLagTrigger, decode_windows, encode_windows
from mirror_worker.api import MirrorConfig


class LagCheckFailed(AirflowException):
    """The mirror's lag evaluation failed: `status` is the worst status, `worst` its worst findings."""

    def __init__(self, mirror: str, evaluation: Evaluation):
        self.mirror = mirror
        self.status = evaluation.status.value
        self.worst = [f"{f.where} {f.status.value}: {f.reasons[0]}" for f in evaluation.findings[:5]]
        super().__init__(f"mirror {mirror}: {evaluation.summary()}")


def window_variable(mirror: str) -> str:
    return f"mirror_lag_window__{mirror}"


class MirrorLagSensor(BaseSensorOperator):
    ui_color = "#f4d58d"

    def __init__(
        self,
        *,
        spec_path: str,
        mirror_name: str,
        limits: Limits,
        window_s: float,
        sample_interval_s: float,
        heartbeat_lookback_s: float | None = None,
        fail_on_warn: bool = False,
        measure_timeout_s: float = 30.0,
        deferrable: bool = True,
        **kwargs,
    ):
        kwargs.setdefault("poke_interval", sample_interval_s)
        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("timeout", window_s * 2 + 300)
        super().__init__(**kwargs)
        # The spec is read where the sensor runs: the resolved config (credentials, `${file:}` values) is never
        # kept on the task or handed to the trigger, whose kwargs Airflow stores in its database.
        self.spec_path = str(spec_path)
        self.mirror_name = mirror_name
        self._config: MirrorConfig | None = None
        self.limits = limits
        self.window_s = float(window_s)
        self.sample_interval_s = float(sample_interval_s)
        self.heartbeat_lookback_s = heartbeat_lookback_s or max(self.window_s, 2 * (limits.max_latency_s or 0))
        self.fail_on_warn = fail_on_warn
        self.measure_timeout_s = measure_timeout_s
        self.deferrable = deferrable

    @property
    def config(self) -> MirrorConfig:
        if self._config is None:
            from mirror_worker.api import select_mirror

            self._config = select_mirror(Path(self.spec_path), self.mirror_name)
        return self._config

    # Deferrable path -------------------------------------------------------------------------------
    def execute(self, context):
        if not self.deferrable:
            return super().execute(context)
        windows = self._observe()
        if covers(windows, time.time(), self.window_s):
            return self._judge(windows)
        self.log.info("mirror %s: %.0fs of history needed; sampling every %.0fs in the triggerer",
                      self.mirror_name, self.window_s, self.sample_interval_s)
        self.defer(
            trigger=MirrorLagTrigger(self.spec_path, self.mirror_name, encode_windows(windows), self.window_s,
                                     self.sample_interval_s, self.measure_timeout_s),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.window_s * 2 + 300),
        )

    def execute_complete(self, context, event: dict):
        if "error" in event:
            raise AirflowException(event["error"])
        windows = decode_windows(event["samples"])
        self._save(windows)
        return self._judge(windows)

    # Reschedule path -------------------------------------------------------------------------------
    def poke(self, context) -> bool:
        windows = self._observe()
        if not covers(windows, time.time(), self.window_s):
            self.log.info("mirror %s: building the %.0fs window", self.mirror_name, self.window_s)
            return False
        self._judge(windows)
        return True

    # Shared ----------------------------------------------------------------------------------------
    def _observe(self) -> dict[PartitionKey, list[Sample]]:
        """Previous samples + one new sample per partition, trimmed to the window and saved."""
        from mirror_airflow.lag.measure import MeasurementError, measure_partitions

        try:
            fresh = measure_partitions(self.config, self.measure_timeout_s)
        except MeasurementError as exc:
            self._record_for_dashboard(verdict=("ERROR", str(exc), None))
            raise AirflowException(str(exc)) from None
        self._record_for_dashboard(samples=fresh)
        windows = merge_windows(self._load(), fresh, time.time(), self.window_s)
        self._save(windows)
        return windows

    def _load(self) -> dict[PartitionKey, list[Sample]]:
        raw = Variable.get(window_variable(self.mirror_name), default=None)
        if not raw:
            return {}
        try:
            return decode_windows(json.loads(raw)["samples"])
        except (ValueError, KeyError, TypeError):
            self.log.warning("mirror %s: unreadable lag window in Variable %s; starting a new one",
                             self.mirror_name, window_variable(self.mirror_name))
            return {}

    def _save(self, windows: dict[PartitionKey, list[Sample]]) -> None:
        Variable.set(window_variable(self.mirror_name), json.dumps({"samples": encode_windows(windows)}),
                     description=f"lag sensor window of mirror {self.mirror_name} (kept by mirror__{self.mirror_name}__lag)")

    def _judge(self, windows: dict[PartitionKey, list[Sample]]) -> dict:
        from mirror_airflow.lag.measure import MeasurementError, newest_heartbeats

        try:
            heartbeats = newest_heartbeats(self.config, self.heartbeat_lookback_s, self.measure_timeout_s)
        except MeasurementError as exc:
            raise AirflowException(str(exc)) from None
        now = time.time()
        evaluation = evaluate(windows, heartbeats, now, self.limits)
        for finding in evaluation.findings:
            self.log.info("mirror %s %s %s: %s", self.mirror_name, finding.where, finding.status.value,
                          "; ".join(finding.reasons))
        newest = {source: newest_heartbeat(beats) for source, beats in heartbeats.items()}
        latency = {source: (None if beat is None else round(now - beat.time, 1)) for source, beat in newest.items()}
        total_lag = sum(w[-1].lag for w in windows.values() if w)
        self.log.info("mirror %s: %s over %d partitions, total lag %d, latency %s", self.mirror_name,
                      evaluation.status.value, len(windows), total_lag, latency)
        self._record_for_dashboard(verdict=(evaluation.status.value, evaluation.summary(), total_lag))
        if evaluation.status.failing or (self.fail_on_warn and evaluation.status is Status.WARN):
            raise LagCheckFailed(self.mirror_name, evaluation)
        return {"status": evaluation.status.value, "partitions": len(windows), "total_lag": total_lag,
                "latency_s": latency}

    def _record_for_dashboard(self, samples=None, verdict: tuple | None = None) -> None:
        """Best effort: the mirror dashboard's bounded history (plugins/mirror_airflow/dashboard/store.py)."""
        from mirror_airflow.dashboard.store import HistoryStore, Verdict

        try:
            store = HistoryStore()
            if samples:
                store.add_samples(self.mirror_name, samples)
            if verdict is not None:
                status, summary, total_lag = verdict
                store.add_verdict(self.mirror_name, Verdict(time.time(), status, summary, total_lag, "lag sensor"))
        except Exception as exc:  # the dashboard must never fail the check
            self.log.warning("mirror %s: dashboard history not written: %s", self.mirror_name, exc)
