"""A lag sensor of mirror `orders` (one source, `east`) with its config already read, for unit tests."""

from __future__ import annotations

from mirror_airflow.lag.rules import Limits
from mirror_airflow.sensors.lag import MirrorLagSensor
from mirror_worker.config.model import build_mirror_config


def orders_lag_sensor(limits: Limits) -> MirrorLagSensor:
    sensor = MirrorLagSensor(task_id="check_lag", spec_path="/specs/mirrors.yaml", mirror_name="orders",
                             limits=limits, window_s=600, sample_interval_s=30)
    sensor._config = build_mirror_config({  # as read from the spec when the task runs
        "name": "orders", "group_id": "kafka-mirror.orders", "whitelist": "orders\\..*",
        "sources": [{"name": "east", "consumer": {"bootstrap.servers": "127.0.0.1:1"}}],
        "producer": {"bootstrap.servers": "127.0.0.1:2"}})
    return sensor
