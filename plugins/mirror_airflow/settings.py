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
              lag: {...}                        # passed raw to mirror_airflow.lag_dag (airflow-lag)
              alerts: {...}                     # passed raw to mirror_airflow.notifiers.notifiers_for

The worker ignores this mapping (mirror_worker/spec.py); the DAG factory validates it here, unknown
keys rejected, so a typo fails that mirror's DAG file with the mirror and key named.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict, Field, StrictBool, ValidationError, field_validator

from mirror_airflow.exceptions import MirrorSpecError
from mirror_airflow.spec_models import KebabModel, validation_message
from mirror_worker.spec import read_spec

AIRFLOW_KEY = "airflow"
_CONN_ID = r"^[A-Za-z0-9_.-]+$"


class MirrorAirflowSettings(KebabModel):
    model_config = ConfigDict(populate_by_name=True)

    # The lifecycle DAG is created paused (Airflow's usual default) unless the spec says otherwise.
    unpaused: StrictBool = False
    # Worker tasks of the lifecycle DAG, each its own process in the mirror's group with its own slot.
    # Strict: YAML gives an int; "2" or true is a typo, not a count. 1024 is Airflow's core.max_map_length.
    workers: int = Field(1, ge=1, le=1024, strict=True)
    worker_retries: int = Field(3, ge=0, le=100)
    worker_retry_delay_s: float = Field(30.0, ge=0)
    # How often run_worker asks the REST API whether its DAG was paused (the contract caps it at 15 s).
    pause_check_interval_s: float = Field(10.0, gt=0, le=15)
    api_conn_id: str = Field("airflow_api", pattern=_CONN_ID)
    # Clients of the discover/ensure tasks from Airflow connections instead of the spec (one source only).
    source_conn_id: str | None = Field(None, pattern=_CONN_ID)
    destination_conn_id: str | None = Field(None, pattern=_CONN_ID)
    verify_schedule: str | None = "0 2 * * *"
    spark_conn_id: str = Field("spark_default", pattern=_CONN_ID)
    verify_report_dir: str | None = None
    lag: dict = Field(default_factory=dict)
    alerts: dict = Field(default_factory=dict)

    @field_validator("verify_schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None or value.startswith("@"):
            return value
        if len(value.split()) != 5:
            raise ValueError(f"a 5-field cron expression or @preset is expected, got {value!r}")
        return value


def airflow_sections(spec: dict) -> dict[str, dict]:
    """Mirror name -> its raw `airflow:` mapping (group settings overlaid by the mirror's own keys)."""
    out: dict[str, dict] = {}
    for group in spec.get("groups") or []:
        if not isinstance(group, dict):
            continue
        settings = group.get("settings") if isinstance(group.get("settings"), dict) else {}
        group_section = settings.get(AIRFLOW_KEY) or {}
        for mirror in group.get("mirrors") or []:
            if not isinstance(mirror, dict) or not mirror.get("name"):
                continue
            own = mirror.get(AIRFLOW_KEY) or {}
            if not isinstance(group_section, dict) or not isinstance(own, dict):
                out[str(mirror["name"])] = {"__not_a_mapping__": True}
                continue
            out[str(mirror["name"])] = {**group_section, **own}
    return out


def parse_settings(raw: dict, where: str) -> MirrorAirflowSettings:
    """Validate one mirror's `airflow:` mapping; the first problem becomes one MirrorSpecError line."""
    if raw.get("__not_a_mapping__"):
        raise MirrorSpecError(f"{where}: airflow: a mapping is expected")
    try:
        return MirrorAirflowSettings.model_validate(raw)
    except ValidationError as exc:
        raise MirrorSpecError(validation_message(exc, where, key_prefix="airflow.")) from None


def load_settings(spec_path: Path, mirror: str) -> MirrorAirflowSettings:
    raw = airflow_sections(read_spec(spec_path)).get(mirror, {})
    return parse_settings(raw, f"{spec_path}: mirror {mirror!r}")
