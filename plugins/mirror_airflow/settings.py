"""The Airflow-only settings of a mirror: the optional `airflow:` mapping of the YAML spec.

    groups:
      - name: local
        settings:
          airflow: {worker-retries: 5}          # every mirror of the group
        mirrors:
          - name: orders
            airflow:                            # this mirror's own keys win, key by key
              unpaused: true
              verify-schedule: "0 2 * * *"
              lag: {...}                        # passed raw to mirror_airflow.lag.dag (airflow-lag)
              alerts: {...}                     # passed raw to mirror_airflow.notifications.alerts.notifiers_for

The spec is read once, by mirror_worker/config/spec.py: each `SpecEntry` carries this mapping as written (group
and mirror keys overlaid) beside the worker's config; the worker ignores it. The DAG factory, the dashboard
and the operators validate it here, unknown keys rejected, so a typo fails that mirror's DAG file with the
mirror and key named.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, StrictBool, ValidationError, field_validator

from mirror_airflow.exceptions import MirrorSpecError
from mirror_airflow.spec_models import KebabModel, validation_message
from mirror_worker.api import SpecEntry, load_entries

AIRFLOW_KEY = "airflow"
_CONN_ID = r"^[A-Za-z0-9_.-]+$"


class MirrorAirflowSettings(KebabModel):
    model_config = ConfigDict(populate_by_name=True)

    # The lifecycle DAG is created paused (Airflow's usual default) unless the spec says otherwise.
    unpaused: StrictBool = False
    # Worker tasks of the lifecycle DAG, each its own process in the mirror's group with its own slot.
    # Strict: YAML gives an int; "2" or true is a typo, not a count. 1024 is Airflow's core.max_map_length.
    workers: int = Field(1, ge=1, le=1024, strict=True)
    worker_retries: int = Field(3, ge=0, le=100, description="restarts of a crashed worker before the failure alerts")
    worker_retry_delay_s: float = Field(30.0, ge=0, description="delay between those restarts")
    # How often run_worker asks the REST API whether its DAG was paused (the contract caps it at 15 s).
    pause_check_interval_s: float = Field(10.0, gt=0, le=15)
    api_conn_id: str = Field("airflow_api", pattern=_CONN_ID, description="the REST API connection")
    # Clients of the discover/ensure tasks from Airflow connections instead of the spec (one source only).
    source_conn_id: str | None = Field(None, pattern=_CONN_ID)
    destination_conn_id: str | None = Field(None, pattern=_CONN_ID, description="the destination's Kafka connection "
                                            "for those tasks")
    verify_schedule: str | None = Field("0 2 * * *", description="the nightly check: cron, @preset or null (manual only)")
    spark_conn_id: str = Field("spark_default", pattern=_CONN_ID, description="the spark-submit connection")
    verify_report_dir: str | None = Field(None, description="where reports go (default $MIRROR_REPORT_DIR, else "
                                          "$AIRFLOW_HOME/mirror-reports)")
    # Who may approve this mirror's failover (Airflow user ids; {id, name} where an auth manager's ids are not
    # the user names): the approval task is assigned to them, minus whoever triggered the run. Empty: anyone with
    # the DAG's HITL permission, the triggering user included (a warning says so).
    failover_approvers: list[str | dict[str, str]] = Field(default_factory=list, description="users who may approve "
                                                           "the failover (ids, or {id, name}); never its triggerer")
    lag: dict = Field(default_factory=dict, description="the lag DAG's settings (airflow.lag)")
    alerts: dict = Field(default_factory=dict, description="the notifiers (airflow.alerts)")

    @field_validator("failover_approvers")
    @classmethod
    def _approvers(cls, value: list) -> list:
        for user in value:
            if isinstance(user, dict) and (set(user) - {"id", "name"} or not user.get("id")):
                raise ValueError("an approver is a user id, or a mapping with id (and name)")
        return value

    @field_validator("verify_schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None or value.startswith("@"):
            return value
        if len(value.split()) != 5:
            raise ValueError(f"a 5-field cron expression or @preset is expected, got {value!r}")
        return value


def approvers(settings: MirrorAirflowSettings) -> list[dict[str, str]]:
    """`failover_approvers` as Airflow's HITLUser mappings ({id, name})."""
    return [{"id": u, "name": u} if isinstance(u, str) else {"id": u["id"], "name": u.get("name", u["id"])}
            for u in settings.failover_approvers]


def parse_settings(raw: object, where: str) -> MirrorAirflowSettings:
    """Validate one mirror's `airflow:` mapping (`SpecEntry.airflow`); the first problem becomes one
    MirrorSpecError line."""
    if not isinstance(raw, dict):
        raise MirrorSpecError(f"{where}: airflow: a mapping is expected")
    try:
        return MirrorAirflowSettings.model_validate(raw)
    except ValidationError as exc:
        raise MirrorSpecError(validation_message(exc, where, key_prefix="airflow.")) from None


def entry_settings(entry: SpecEntry, spec_path: Path) -> MirrorAirflowSettings:
    return parse_settings(entry.airflow, f"{spec_path}: mirror {entry.name!r}")


def load_settings(spec_path: Path, mirror: str) -> MirrorAirflowSettings:
    for entry in load_entries(spec_path, only=mirror):
        if entry.name == mirror:
            return entry_settings(entry, spec_path)
    raise MirrorSpecError(f"{spec_path}: no mirror named {mirror!r}")
