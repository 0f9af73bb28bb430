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



def lag_task(what: str) -> str:
    """The lag sensor measures the mirror (its task fails with the line): the source refuses its metadata
    (`lag`), the destination its heartbeat topic (`heartbeats`), or the heartbeats do not come within 50 ms."""
    import time
    from types import SimpleNamespace
    from unittest import mock

    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from mirror_airflow.lag import measure

    from mirror_worker.api import select_mirror

    def list_topics(topic=None, timeout=None):
        if what != "stall":
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions={0: None})})

    consumer = SimpleNamespace(list_topics=list_topics, close=lambda: None, assign=lambda partitions: None,
                               offsets_for_times=lambda tps, timeout: [TopicPartition(tp.topic, 0, 2) for tp in tps],
                               get_watermark_offsets=lambda tp, timeout, cached: (0, 5),
                               consume=lambda n, timeout: time.sleep(0.01) or [])
    mirror = select_mirror(Path("spec.yaml"), "orders")
    with mock.patch.object(measure, "side_consumer", lambda *args: consumer):
        try:
            measure.measure_partitions(mirror, 1) if what == "lag" else measure.newest_heartbeats(mirror, 60, 0.05)
        except measure.MeasurementError as exc:  # the sensor's AirflowException
            print(exc, file=sys.stderr)
    return TASK_FAILS


class MarkingAdmin:
    """The clusters' admin as the failover's tasks use it: consumer groups with `members` (group -> count), the
    failover's mark topic created (shown in the metadata only when `shows_mark`) and deleted."""

    def __init__(self, members: dict[str, int], shows_mark: bool = True) -> None:
        from tests.unit.fakes import FakeAdmin

        self.groups, self.shows_mark, self.marks = FakeAdmin(group_members=members), shows_mark, set()

    def describe_consumer_groups(self, groups, request_timeout=None):
        return self.groups.describe_consumer_groups(groups)

    def list_topics(self, topic=None, timeout=None):
        from types import SimpleNamespace

        shown = self.marks if self.shows_mark else set()
        return SimpleNamespace(brokers={1: None}, topics={t: SimpleNamespace(error=None) for t in shown if t == topic})

    def create_topics(self, topics, request_timeout=None):
        from tests.unit.fakes import FakeFuture

        self.marks |= {t.topic for t in topics}
        return {t.topic: FakeFuture() for t in topics}

    def delete_topics(self, topics, operation_timeout=None):
        from tests.unit.fakes import FakeFuture

        self.marks -= set(topics)
        return {t: FakeFuture() for t in topics}


def handover(what: str) -> str:
    """The failover's (or the catch-up's) stop_mirror task, or the catch-up's resume_mirror: a catch-up holds the
    lease group (`catchup`), the mirror's workers do not leave its group (`busy`), the mark topic never shows in the
    destination's metadata (`mark`), or the Airflow API connection is gone at the resume (`resume`)."""
    import itertools
    from types import SimpleNamespace
    from unittest import mock

    from mirror_airflow.operators.handover import ResumeMirrorOperator, StopMirrorOperator

    from mirror_worker.dr import failover_mark

    members = {"catchup": {"kafka-mirror.orders.catchup": 1}, "busy": {"kafka-mirror.orders": 2}}.get(what, {})
    admin = MarkingAdmin(members, shows_mark=what != "mark")
    clock = SimpleNamespace(monotonic=itertools.count(0, 40).__next__, sleep=lambda seconds: None)
    names = {"spec_path": "spec.yaml", "mirror_name": "orders", "lifecycle_dag_id": "mirror__orders"}
    with mock.patch("mirror_airflow.operators.base.admin_client", lambda settings: admin), \
            mock.patch.object(failover_mark, "time", clock):
        try:
            if what == "resume":
                ResumeMirrorOperator(task_id="resume_mirror", **names).execute(
                    {"ti": SimpleNamespace(xcom_pull=lambda task_ids: {"paused_here": True})})
            else:
                StopMirrorOperator(task_id="stop_mirror", wait_timeout_s=1e-9, failover=what != "busy",
                                   **names).execute({})
        except Exception as exc:  # noqa: BLE001 - what fails the task: a RuntimeError, the mark's MirrorError
            print(exc, file=sys.stderr)
    return TASK_FAILS


def failover_not_applied() -> str:
    """The failover's report task after an apply that wrote no group's offsets (the groups still active)."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException
    from mirror_airflow.operators.failover import FailoverReportOperator

    pulled = {"impact": {"mirror": "orders", "groups": []}, "approve": {"responded_by_user": {"id": "bob"}},
              "stop_mirror": {"paused_here": True}, "apply_offsets": {"applied": [], "not_applied": [
                  {"group": "app", "reason": "destination group 'app' has 2 active member(s)"}]}}
    try:
        FailoverReportOperator(task_id="report", spec_path="spec.yaml", mirror_name="orders",
                               lifecycle_dag_id="mirror__orders", report_dir=".").execute(
            {"ti": SimpleNamespace(xcom_pull=lambda task_ids, key=None: pulled[task_ids])})
    except AirflowFailException as exc:
        print(exc, file=sys.stderr)
    return FAILS_AT_ONCE

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
    # Airflow: the lag sensor and the failover's stop, resume and report
    "mirror …: lag measurement failed: …": case(lag_task, "lag", exit_code=TASK_FAILS),
    "mirror …: heartbeat read failed: …": case(lag_task, "heartbeats", exit_code=TASK_FAILS),
    "mirror …: reading heartbeats from … timed out": case(lag_task, "stall", exit_code=TASK_FAILS),
    "a catch-up holds mirror group … on source … (its lease group … has … active member(s) after … s): let it "
    "finish, then fail over": case(handover, "catchup", exit_code=TASK_FAILS),
    "mirror group … on source … still has … active member(s) after … s: pause DAG … (or stop its worker) first": case(
        handover, "busy", exit_code=TASK_FAILS),
    "topic … created but not in the destination's metadata after … s": case(handover, "mark", exit_code=TASK_FAILS),
    "cannot unpause …: connection … is gone": case(handover, "resume", exit_code=TASK_FAILS),
    "failover of mirror …: … (report …)": case(failover_not_applied, exit_code=FAILS_AT_ONCE),
}
