"""build_lag_dag and notifiers_for: validation of the raw spec mappings, DAG shape, alert text (no servers)."""

from __future__ import annotations

import logging

import pytest

from mirror_airflow.lag.dag import build_lag_dag
from mirror_airflow.lag.rules import Evaluation, Finding, Status
from mirror_airflow.notifications.alerts import (
    EmailNotifier, SlackWebhookNotifier, WebhookNotifier, alert_fields, alert_text, notifiers_for,
)
from mirror_airflow.sensors.lag import LagCheckFailed, MirrorLagSensor
from mirror_worker.config.model import build_mirror_config
from mirror_worker.exceptions import ConfigError


SPEC = "/specs/mirrors.yaml"


@pytest.fixture
def mirror():
    return build_mirror_config({
        "name": "orders", "group_id": "kafka-mirror.orders", "whitelist": "orders\\..*",
        "sources": [{"name": "east", "consumer": {"bootstrap.servers": "127.0.0.1:1"}}],
        "producer": {"bootstrap.servers": "127.0.0.1:2"},
    })


def test_lag_dag_shape_and_defaults(mirror):
    dag = build_lag_dag(mirror, {}, {}, spec_path=SPEC)
    assert dag.dag_id == "mirror__orders__lag"
    assert dag.catchup is False and dag.max_active_runs == 1
    assert str(dag.schedule) == "* * * * *" or getattr(dag.timetable, "summary", "") == "* * * * *"
    [task] = dag.tasks
    assert isinstance(task, MirrorLagSensor) and task.task_id == "check_lag"
    assert task.retries == 0 and not task.on_failure_callback
    assert task.window_s == 600 and task.limits.stop_after_s == 300 and task.limits.max_latency_s == 300
    assert task.deferrable


def test_lag_dag_settings_and_notifiers(mirror):
    dag = build_lag_dag(
        mirror,
        {"schedule": "*/5 * * * *", "window-minutes": 2, "sample-interval-seconds": 10, "allowed-lag": 50,
         "stop-after-seconds": 60, "max-lag-records": 10_000, "max-latency-seconds": 90, "deferrable": False},
        {"webhook-url": "https://oncall.example/hook?token=s3cret", "slack-webhook-url": "https://hooks.slack.com/x"},
        spec_path=SPEC, is_paused_upon_creation=True,
    )
    [task] = dag.tasks
    assert task.window_s == 120 and task.sample_interval_s == 10 and not task.deferrable
    assert task.mode == "reschedule" and task.poke_interval == 10
    assert (task.limits.allowed_lag, task.limits.max_lag_records, task.limits.max_latency_s) == (50, 10_000, 90)
    assert [type(n) for n in task.on_failure_callback] == [WebhookNotifier, SlackWebhookNotifier]
    assert "s3cret" not in repr(task.on_failure_callback)


@pytest.mark.parametrize("lag,alerts,message", [
    ({"window-minute": 1}, {}, "mirror 'orders': airflow.lag: window-minute: unknown key"),
    ({"window_minutes": 1}, {}, "mirror 'orders': airflow.lag: window_minutes: unknown key"),
    ({"allowed-lag": -1}, {}, "mirror 'orders': airflow.lag: allowed-lag: Input should be greater than or equal to 0"),
    ({"stop-after-seconds": 700}, {}, "mirror 'orders': airflow.lag: stop-after-seconds must not exceed window-minutes"),
    ({}, {"webhook": "x"}, "mirror 'orders': airflow.alerts: webhook: unknown key"),
    ({}, {"email": "a@b"}, "mirror 'orders': airflow.alerts: email: Input should be a valid list"),
    ({}, {"slack-webhook-url": "hooks.slack.com/services/T0/B0/s3cret"},
     "mirror 'orders': airflow.alerts: slack-webhook-url: an http:// or https:// URL is expected"),
])
def test_bad_settings_name_the_mirror_and_key(mirror, lag, alerts, message):
    with pytest.raises(ConfigError) as error:
        build_lag_dag(mirror, lag, alerts, spec_path=SPEC)
    assert str(error.value).startswith(message)
    assert "s3cret" not in str(error.value)


def test_notifiers_for():
    assert notifiers_for({}) == [] and notifiers_for(None) == []
    made = notifiers_for({"webhook-connection": "oncall", "slack-webhook-connection": "slack", "email": ["a@b.c"],
                          "email-connection": "smtp_oncall", "timeout-seconds": 3}, mirror="orders")
    assert [type(n) for n in made] == [WebhookNotifier, SlackWebhookNotifier, EmailNotifier]
    assert made[0].connection_id == "oncall" and made[0].timeout == 3 and made[2].to == ["a@b.c"]


def test_email_is_skipped_with_a_log_line_without_the_smtp_provider(monkeypatch, caplog):
    monkeypatch.setattr("mirror_airflow.notifications.alerts.smtp_available", lambda: False)
    with caplog.at_level(logging.WARNING):
        assert notifiers_for({"email": ["a@b.c"]}) == []
    assert "apache-airflow-providers-smtp is not installed" in caplog.text


class _TI:
    dag_id, task_id, run_id, try_number = "mirror__orders__lag", "check_lag", "manual__1", 1


def test_alert_text_names_mirror_task_status_and_worst_partitions():
    evaluation = Evaluation(Status.STOP, (
        Finding("east/orders.a/0", Status.STOP, ("no commit for 300s (>= 120s) with lag 20",), 20),
        Finding("east", Status.LATENCY, ("no recent heartbeat",)),
    ))
    fields = alert_fields({"ti": _TI(), "run_id": "manual__1", "exception": LagCheckFailed("orders", evaluation)})
    assert fields["mirror"] == "orders" and fields["status"] == "STOP"
    assert fields["worst_partitions"] == ["east/orders.a/0 STOP: no commit for 300s (>= 120s) with lag 20",
                                          "east LATENCY: no recent heartbeat"]
    text = alert_text(fields)
    assert text.splitlines()[0] == "Kafka mirror orders: STOP (mirror__orders__lag.check_lag, run manual__1)"
    assert "east/orders.a/0 STOP: no commit for 300s" in text and "http" not in text
    other = alert_fields({"ti": type("TI", (), {"dag_id": "mirror__a__b", "task_id": "run_worker"})(),
                          "exception": RuntimeError("worker exited 1")})
    assert (other["mirror"], other["status"], other["detail"]) == ("a__b", "FAILED", "worker exited 1")


def test_trigger_round_trips_through_its_serialised_kwargs(mirror):
    import importlib

    from mirror_airflow.lag.rules import Sample
    from mirror_airflow.triggers.lag import MirrorLagTrigger, decode_windows, encode_windows

    windows = {("east", "orders.a", 0): [Sample(1.0, None, 5, 0), Sample(2.0, 3, 6, 1)]}
    trigger = MirrorLagTrigger(SPEC, mirror.name, encode_windows(windows), 60.0, 5.0)
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert classpath == "mirror_airflow.triggers.lag.MirrorLagTrigger"
    assert decode_windows(again.samples) == windows and again.serialize() == (classpath, kwargs)
    assert (again.spec_path, again.mirror_name) == (SPEC, "orders")


@pytest.mark.parametrize("url", ["https://hooks example.com/alerts?token=s3cret", "https://[::1/alerts?token=s3cret",
                                 "hooks.example.com/alerts?token=s3cret"])
def test_a_webhook_url_that_cannot_be_used_is_one_line_naming_no_secret(url):
    """A webhook connection whose host has a space, a broken IPv6 literal or no scheme. Before: the request's
    constructor (outside the try), http.client.InvalidURL (not a ValueError) and the error's own target
    (urlsplit) raised raw exceptions into the task log instead of the notifier's one line."""
    from mirror_airflow.notifications.alerts import post_json

    with pytest.raises(RuntimeError) as raised:
        post_json(url, {"text": "mirror orders failed"}, 1)
    assert str(raised.value).endswith(": not a usable URL") and "s3cret" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
