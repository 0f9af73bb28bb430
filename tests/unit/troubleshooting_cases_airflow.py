"""What Airflow shows of the mirrors' errors: a DAG file's import error (the spec's `airflow:` section) and a task
failed by its connection's settings, each made by a scene for test_troubleshooting.py. A scene prints what the
user reads (the exception's message, as the import errors list and the task log end with it) and returns the
page's exit column."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mirror_worker.config.placeholders import SECRETS_DIRS_VARIABLE
from tests.unit.troubleshooting_cases import MIRROR, SOURCE, SPEC, case, with_mirror_keys

IMPORT_ERROR = "DAG import error"
TASK_FAILS = "the task fails"
FAILS_AT_ONCE = "the task fails, not retried"


def dag_import(mirror: str = "orders", check_rendered_in: str | None = None) -> str:
    """Airflow imports the mirror's DAG file (or the spec's check file): the MirrorSpecError it raises is the import
    error Airflow lists (`airflow dags list-import-errors`, the UI's banner)."""
    from mirror_airflow.dag_factory import check_rendered, mirror_dags
    from mirror_airflow.exceptions import MirrorSpecError

    try:
        if check_rendered_in is not None:
            check_rendered(Path(check_rendered_in), Path("spec.yaml"))
        else:
            mirror_dags(mirror, Path("spec.yaml"))
    except MirrorSpecError as exc:
        print(exc, file=sys.stderr)
    return IMPORT_ERROR


def with_airflow(text: str) -> str:
    return with_mirror_keys(f"airflow: {text}")


def connection(hook: str, fields: str, secrets_dirs: str = "") -> str:
    """A task's hook (`kafka` or `schema_registry`) builds its client from connection `trouble` (`fields`: its
    JSON form, as AIRFLOW_CONN_TROUBLE gives it, less its type) on a host whose MIRROR_SECRETS_DIRS is
    `secrets_dirs` (none: unset)."""
    from mirror_airflow.hooks.kafka import KafkaHook
    from mirror_airflow.hooks.schema_registry import SchemaRegistryHook

    from mirror_worker.api import ConfigError

    if secrets_dirs:
        os.environ[SECRETS_DIRS_VARIABLE] = secrets_dirs
    os.environ["AIRFLOW_CONN_TROUBLE"] = json.dumps({"conn_type": "kafka" if hook == "kafka" else "http",
                                                      **json.loads(fields)})
    try:
        KafkaHook("trouble").client_settings() if hook == "kafka" else SchemaRegistryHook("trouble").client_config()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
    finally:
        del os.environ["AIRFLOW_CONN_TROUBLE"]
        os.environ.pop(SECRETS_DIRS_VARIABLE, None)
    return TASK_FAILS


def conn(**fields) -> str:
    return json.dumps(fields)


def failover_task(task: str, params: str) -> str:
    """A failover DAG's task (`approve`: by the user who triggered the run, the only approver; `impact`: with
    the run's params, JSON) fails the run at once."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from mirror_airflow.operators.failover import FailoverApprovalOperator, FailoverImpactOperator

    try:
        if task == "approve":
            FailoverApprovalOperator(task_id="approve", subject="failover", approvers=[{"id": "ann", "name": "ann"}]
                                     ).execute({"dag_run": SimpleNamespace(triggering_user_name="ann")})
        else:
            FailoverImpactOperator(task_id="impact", spec_path="spec.yaml", mirror_name="orders").execute(
                {"params": json.loads(params)})
    except AirflowFailException as exc:
        print(exc, file=sys.stderr)
    return FAILS_AT_ONCE


TASK_RETRIED = "the task fails (retried)"
ALERT_LOST = "the alert is not sent"


def group_pattern_not_a_regex() -> str:
    """The failover's impact task with param group_pattern `(`: the source's groups are listed first."""
    from unittest import mock

    with mock.patch("mirror_airflow.hooks.offsets.MirrorOffsetsHook.source_groups", lambda self: ["app"]):
        return failover_task("impact", '{"group_pattern": "("}')


def webhook(url: str, status: str = "") -> str:
    """An alert posted to `url` (a webhook connection's host and endpoint); `status`: what a server there answers.
    Airflow logs the notifier's failure in the task log; the task's own outcome stands."""
    import urllib.error
    from unittest import mock

    from mirror_airflow.notifications.alerts import post_json

    answer = urllib.error.HTTPError(url, int(status), "Forbidden", {}, None) if status else None
    with mock.patch("urllib.request.urlopen", side_effect=answer) if answer else mock.MagicMock():
        try:
            post_json(url, {"text": "mirror orders failed"}, 1)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
    return ALERT_LOST


def worker_exits() -> str:
    """The run_worker task's mirror worker exits 1: the task fails with the worker's last stderr line."""
    from mirror_airflow.exceptions import WorkerFailedError

    print(WorkerFailedError("orders", 1, "mirror_worker: destination cluster unreachable within 30s: …"),
          file=sys.stderr)
    return TASK_RETRIED


def spark_task(job: str, code: str, report: str = "") -> str:
    """The verify DAG's check (or the catch-up's task) after spark-submit ended with exit `code` (the launcher's
    outcome), the check's report `report` written."""
    from unittest import mock

    from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator

    operator = (ConsistencyCheckOperator if job == "check" else CatchupOperator)(
        task_id=job, spec_path="spec.yaml", mirror_name="orders", report_dir=".")
    if report:
        Path("r.json").write_text(report)
    operator.report_path = operator.summary_path = Path("r.json") if report else None  # what prepare() names
    with mock.patch.object(type(operator), "submit", lambda self, context: (int(code), None)):
        try:
            operator.execute({})
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
    return TASK_RETRIED


KAFKA = {"extra": json.dumps({"bootstrap.servers": "127.0.0.1:1"})}
SASL = {"extra": json.dumps({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL"})}
REGISTRY = {"host": "https://127.0.0.1", "port": 1}

CASES = {
    # Airflow: DAG import errors
    "…: mirror …: airflow: a mapping is expected": case(dag_import, exit_code=IMPORT_ERROR,
                                                         spec_yaml=with_airflow("3")),
    "…: mirror …: airflow.…: unknown key": case(dag_import, exit_code=IMPORT_ERROR,
                                                 spec_yaml=with_airflow("{wokers: 2}")),
    "…: mirror …: airflow.failover-approvers: an approver is a user id, or a mapping with id (and name)": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=with_airflow("{failover-approvers: [{name: x}]}")),
    "…: mirror …: airflow.verify-schedule: a 5-field cron expression or @preset is expected, got …": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=with_airflow("{verify-schedule: '0 2 *'}")),
    "…: mirror …: airflow.source-conn-id: the mirror has several sources; a connection stands for one": case(
        dag_import, exit_code=IMPORT_ERROR, spec_yaml=SPEC.replace(
            f"    {SOURCE}\n", f"    sources: [{SOURCE[8:]}, {SOURCE[8:].replace('east', 'west')}]\n").replace(
            MIRROR, MIRROR + "        airflow: {source-conn-id: k}\n")),
    "…: mirror …: airflow.lag: stop-after-seconds must not exceed window-minutes (the rules see only the window)": case(
        dag_import, exit_code=IMPORT_ERROR,
        spec_yaml=with_airflow("{lag: {window-minutes: 1, stop-after-seconds: 120}}")),
    "…: no mirror named … any more: regenerate the DAG files (python -m mirror_airflow.dag_factory render --spec … "
    "--out dags/)": case(dag_import, "gone", exit_code=IMPORT_ERROR),
    "…: mirror(s) … have no DAG file in …: run python -m mirror_airflow.dag_factory render --spec … --out …": case(
        dag_import, "orders", "{dir}/dags", exit_code=IMPORT_ERROR),
    # Airflow: connections
    "Airflow connection …: extra is not valid JSON": case(connection, "kafka", conn(extra="{"), exit_code=TASK_FAILS),
    "Airflow connection …: extra must be a JSON object of librdkafka settings": case(
        connection, "kafka", conn(extra="[1]"), exit_code=TASK_FAILS),
    "Airflow connection …: bootstrap.servers is required in the extras (a JSON object of librdkafka settings, e.g. "
    '{"bootstrap.servers": "host:9092"})': case(connection, "kafka", conn(extra="{}"), exit_code=TASK_FAILS),
    "Airflow connection …: a login or password needs security.protocol SASL_SSL or SASL_PLAINTEXT in extra": case(
        connection, "kafka", conn(login="u", password="p", **KAFKA), exit_code=TASK_FAILS),
    "Airflow connection …: login: placeholders are not resolved here (the login is shown in clear)": case(
        connection, "kafka", conn(login="${file:/s:u}", password="p", **SASL), exit_code=TASK_FAILS),
    "Airflow connection …: … is set both in extra and as the connection's …": case(
        connection, "kafka", conn(login="u", password="p", extra=json.dumps(
            {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL", "sasl.username": "v"})),
        exit_code=TASK_FAILS),
    "Airflow connection …: host is required (the schema registry's address)": case(
        connection, "schema_registry", conn(), exit_code=TASK_FAILS),
    "Airflow connection …: basic.auth.user.info is set both in extra and as the login/password": case(
        connection, "schema_registry", conn(login="u", password="p", extra=json.dumps({"basic.auth.user.info": "a:b"}),
                                            **REGISTRY), exit_code=TASK_FAILS),
    "Airflow connection …: …: placeholders are off in an Airflow connection: the host names no secrets directory "
    "(MIRROR_SECRETS_DIRS)": case(connection, "kafka", conn(login="u", password="${file:/s.properties:pw}", **SASL),
                                  exit_code=TASK_FAILS),
    "Airflow connection …: … is outside the secrets directories (MIRROR_SECRETS_DIRS): refused": case(
        connection, "kafka", conn(login="u", password="${file:/etc/s.properties:pw}", **SASL), "{dir}",
        exit_code=TASK_FAILS),
    "Airflow connection …: … runs or loads code on the host: not accepted from a connection": case(
        connection, "kafka", conn(extra=json.dumps({"bootstrap.servers": "127.0.0.1:1",
                                                    "sasl.kerberos.kinit.cmd": "kinit"})), exit_code=TASK_FAILS),
    "Airflow connection …: …: a connection's key files are read only inside MIRROR_SECRETS_DIRS, which this host "
    "does not set": case(connection, "kafka", conn(extra=json.dumps({"bootstrap.servers": "127.0.0.1:1",
                                                                     "ssl.key.location": "/k.pem"})),
                         exit_code=TASK_FAILS),
    # Airflow: the failover
    "the failover needs an approver other than …, who triggered it: add one to airflow.failover-approvers": case(
        failover_task, "approve", "{}", exit_code=FAILS_AT_ONCE),
    "group …: the mirror's own group, not a consumer group": case(
        failover_task, "impact", '{"groups": "kafka-mirror.orders"}', exit_code=FAILS_AT_ONCE),
    "no consumer group selected: give param groups (comma list) and/or group_pattern (a regex matching group ids on "
    "the source)": case(failover_task, "impact", '{"groups": ""}', exit_code=FAILS_AT_ONCE),
    "param group_pattern: not a regex (…): …": case(group_pattern_not_a_regex, exit_code=FAILS_AT_ONCE),
    # Airflow: alerts and the mirror's tasks
    "webhook … unreachable: …": case(webhook, "http://127.0.0.1:1/alerts", exit_code=ALERT_LOST),
    "webhook … answered HTTP …": case(webhook, "https://hooks.example.com/alerts", "403", exit_code=ALERT_LOST),
    "webhook …: not a usable URL": case(webhook, "https://hooks example.com/alerts", exit_code=ALERT_LOST),
    "mirror worker … exited with code ……": case(worker_exits, exit_code=TASK_RETRIED),
    "mirror … is inconsistent: …": case(
        spark_task, "check", "1", '{"status": "inconsistent", "totals": {"missing": 3}}', exit_code=TASK_RETRIED),
    "mirror …: the consistency check did not complete (exit …, …): …": case(
        spark_task, "check", "3", '{"status": "incomplete", "totals": {}}', exit_code=TASK_RETRIED),
    "mirror …: the catch-up … (exit …): …": case(spark_task, "catchup", "1", '{"records": 120, "seconds": 4}',
                                                  exit_code=TASK_RETRIED),
    "Airflow connection …: …: ${env:...} is not resolved in …; put the secret in a file under …": case(
        connection, "kafka", conn(login="u", password="${env:KAFKA_PASSWORD}", **SASL), "{dir}", exit_code=TASK_FAILS),
    "usage: spark_launcher.py … FILE MODULE [ARGS...]": case("mirror_airflow.spark_launcher", exit_code=2),
}
