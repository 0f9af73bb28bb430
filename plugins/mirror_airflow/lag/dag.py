"""`mirror__<name>__lag`: the lag sensor of one mirror, every minute by default.

    airflow:
      lag:
        schedule: "* * * * *"          # cron, preset or null (manual only)
        window-minutes: 10             # the sliding window the rules judge
        sample-interval-seconds: 30    # sampling while the window fills (no history yet)
        allowed-lag: 0                 # STALL only above this many records; WARN ignores lag up to it
        stop-after-seconds: 300        # STOP: the offset has not moved this long while there is lag
        max-lag-records: null          # LAG: absolute threshold per partition
        max-latency-seconds: 300       # LATENCY: newest heartbeat older than this (null: off)
        max-clock-skew-seconds: 60     # SKEW: newest heartbeat stamped further ahead of the sensor's clock
        fail-on-warn: false
        measure-timeout-seconds: 30
        deferrable: true               # false: poke in reschedule mode (no triggerer needed)
"""

from __future__ import annotations

from datetime import datetime, timezone

from pydantic import Field, model_validator

from airflow.sdk import DAG
from mirror_airflow.dag_ids import lag_dag_id
from mirror_airflow.lag.rules import Limits
from mirror_airflow.notifications.alerts import notifiers_for
from mirror_airflow.sensors.lag import MirrorLagSensor
from mirror_airflow.spec_models import KebabModel
from mirror_worker.api import ConfigError, MirrorConfig


class LagSettings(KebabModel):
    schedule: str | None = Field("* * * * *", description="the lag DAG's schedule")
    window_minutes: float = Field(10.0, gt=0, description="the sliding window the rules judge")
    sample_interval_seconds: float = Field(30.0, gt=0, description="the trigger's sampling period while the window fills")
    allowed_lag: int = Field(0, ge=0, description="lag that WARN and STALL tolerate")
    stop_after_seconds: float = Field(300.0, gt=0, description="STOP: the offset has not moved this long while there "
                                      "was always lag (at most the window)")
    max_lag_records: int | None = Field(None, ge=0, description="LAG: the latest lag exceeds this")
    max_latency_seconds: float | None = Field(300.0, gt=0, description="LATENCY: the newest heartbeat is older than this")
    max_clock_skew_seconds: float = Field(60.0, gt=0, description="SKEW: the newest heartbeat is stamped more than "
                                          "this ahead of the sensor's clock; WARN: a worker's stamp is this far "
                                          "from the destination broker's")
    fail_on_warn: bool = Field(False, description="WARN fails the task too (else it is logged)")
    measure_timeout_seconds: float = Field(30.0, gt=0, description="timeout of one measurement")
    deferrable: bool = Field(True, description="defer to the triggerer while the window fills; false: poke in "
                             "reschedule mode")

    @model_validator(mode="after")
    def _stop_within_window(self) -> "LagSettings":
        if self.stop_after_seconds > self.window_minutes * 60:
            raise ValueError("stop-after-seconds must not exceed window-minutes (the rules see only the window)")
        return self

    def limits(self) -> Limits:
        return Limits(allowed_lag=self.allowed_lag, stop_after_s=self.stop_after_seconds,
                      max_lag_records=self.max_lag_records, max_latency_s=self.max_latency_seconds,
                      max_clock_skew_s=self.max_clock_skew_seconds)


def build_lag_dag(mirror: MirrorConfig, lag: dict, alerts: dict, *, spec_path, **dag_kwargs) -> DAG:
    """The lag DAG of `mirror` (from the spec at `spec_path`, which its task reads when it runs); `lag` and
    `alerts` are the raw spec mappings (kebab-case keys)."""
    settings = LagSettings.parse(lag, f"mirror {mirror.name!r}: airflow.lag")
    try:
        notifiers = notifiers_for(alerts, mirror=mirror.name)
    except ConfigError as exc:
        raise ConfigError(f"mirror {mirror.name!r}: airflow.{exc}") from None
    options = {
        "dag_id": lag_dag_id(mirror.name),
        "schedule": settings.schedule,
        "start_date": datetime(2024, 1, 1, tzinfo=timezone.utc),
        "catchup": False,
        "max_active_runs": 1,
        "tags": ["kafka-mirror", "lag"],
        "doc_md": f"Lag and replication latency of mirror `{mirror.name}` (group `{mirror.group_id}`), "
                  f"judged over {settings.window_minutes:g} minutes. See docs/operations/alerts.md.",
        **dag_kwargs,
    }
    with DAG(**options) as dag:
        MirrorLagSensor(
            task_id="check_lag",
            spec_path=str(spec_path),
            mirror_name=mirror.name,
            limits=settings.limits(),
            window_s=settings.window_minutes * 60,
            sample_interval_s=settings.sample_interval_seconds,
            fail_on_warn=settings.fail_on_warn,
            measure_timeout_s=settings.measure_timeout_seconds,
            deferrable=settings.deferrable,
            retries=0,
            on_failure_callback=notifiers or None,
        )
    return dag
