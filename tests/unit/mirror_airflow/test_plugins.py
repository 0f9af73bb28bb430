"""Pure logic of the Airflow plugins: pause decisions, `airflow:` settings, hooks' config, stubs, argv."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.airflow_support import ROOT

from mirror_airflow.dag_factory import check_rendered, render, stub_name
from mirror_airflow.exceptions import ConnectionConfigError, MirrorSpecError
from mirror_airflow.hooks.airflow_api import AirflowApi
from mirror_airflow.hooks.kafka import KafkaHook
from mirror_airflow.hooks.schema_registry import SchemaRegistryHook
from mirror_airflow.operators.spark import CatchupOperator, ConsistencyCheckOperator
from mirror_airflow.operators.worker import MirrorWorkerOperator
from mirror_airflow.settings import load_settings, parse_settings
from mirror_airflow.supervisor import Action, next_action, pause_check_due
from mirror_worker.config.spec import load_entries
from mirror_worker.exceptions import ConfigError

SPEC = """
groups:
  - name: g
    source: {kafka: {bootstrap.servers: "127.0.0.1:1"}}
    destination: {kafka: {bootstrap.servers: "127.0.0.1:2"}}
    settings:
      airflow: {worker-retries: 5, pause-check-interval-s: 5}
    mirrors:
      - name: orders
        whitelist: "orders"
        airflow: {worker-retries: 1, unpaused: true, alerts: {webhook: {url: "http://x"}}}
      - name: plain
        whitelist: "plain"
"""


@pytest.mark.parametrize("returncode, paused, elapsed, stop_after, expected", [
    (None, None, 0, None, Action.CONTINUE),          # running, no API: keep going
    (None, False, 1e6, None, Action.CONTINUE),       # running, not paused, unbounded
    (None, True, 0, None, Action.STOP_PAUSED),
    (None, True, 100, 10, Action.STOP_PAUSED),       # paused wins over the bound
    (None, False, 9.9, 10, Action.CONTINUE),
    (None, None, 10, 10, Action.STOP_BOUNDED),
    (0, True, 0, None, Action.EXITED),               # an exit is reported whatever else holds
    (1, None, 0, None, Action.EXITED),
])
def test_next_action(returncode, paused, elapsed, stop_after, expected):
    assert next_action(returncode, paused, elapsed, stop_after) is expected


@pytest.mark.parametrize("now, last, interval, due", [
    (0.0, None, 10, True), (5.0, 0.0, 10, False), (10.0, 0.0, 10, True), (100.0, 95.0, 15, False),
])
def test_pause_check_due(now, last, interval, due):
    assert pause_check_due(now, last, interval) is due


def test_worker_operator_validates_arguments():
    common = {"spec_path": "/x.yaml", "mirror_name": "m"}
    with pytest.raises(ValueError, match="pause_check_interval_s"):
        MirrorWorkerOperator(task_id="w1", pause_check_interval_s=20, **common)
    with pytest.raises(ValueError, match="stop_after_s"):
        MirrorWorkerOperator(task_id="w2", stop_after_s=0, **common)
    with pytest.raises(ValueError, match="spec_path and mirror_name"):
        MirrorWorkerOperator(task_id="w3", spec_path="", mirror_name="m")
    op = MirrorWorkerOperator(task_id="w4", **common)
    assert op.worker_argv()[1:] == ["-m", "mirror_worker", "--config", "/x.yaml", "--mirror", "m"]
    assert op.worker_argv()[0] == sys.executable
    with pytest.raises(ValueError, match="worker_slot must be a non-negative integer, got -1"):
        MirrorWorkerOperator(task_id="w5", worker_slot=-1, **common)
    assert MirrorWorkerOperator(task_id="w6", worker_slot=3, **common).worker_argv()[-2:] == ["--worker.slot", "3"]


def test_spec_accepts_and_ignores_the_airflow_mapping(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC)
    entries = {e.name: e for e in load_entries(path)}
    assert entries["orders"].error is None and entries["plain"].error is None
    assert "airflow" not in entries["orders"].config.model_dump()


def test_airflow_settings_overlay_and_defaults(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC)
    orders = load_settings(path, "orders")
    assert (orders.worker_retries, orders.pause_check_interval_s, orders.unpaused) == (1, 5, True)
    assert orders.alerts == {"webhook": {"url": "http://x"}}
    plain = load_settings(path, "plain")
    assert (plain.worker_retries, plain.unpaused, plain.api_conn_id, plain.verify_schedule) == (5, False, "airflow_api", "0 2 * * *")


@pytest.mark.parametrize("raw, message", [
    ({"worker-retrys": 3}, "mirror 'm': airflow.worker-retrys: unknown key"),
    ({"pause-check-interval-s": 30}, "mirror 'm': airflow.pause-check-interval-s: Input should be less than or equal to 15"),
    ({"verify-schedule": "every night"}, "mirror 'm': airflow.verify-schedule: a 5-field cron expression"),
    ({"api-conn-id": "has space"}, "mirror 'm': airflow.api-conn-id: String should match pattern"),
])
def test_airflow_settings_errors_name_mirror_and_key(raw, message):
    with pytest.raises(MirrorSpecError) as info:
        parse_settings(raw, "spec.yaml: mirror 'm'")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("where", ["mirror", "group"])
def test_airflow_section_must_be_a_mapping(tmp_path, where):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC.replace('airflow: {worker-retries: 1, unpaused: true, alerts: {webhook: {url: "http://x"}}}',
                                 "airflow: yes") if where == "mirror"
                    else SPEC.replace("airflow: {worker-retries: 5, pause-check-interval-s: 5}", "airflow: [5]"))
    with pytest.raises(MirrorSpecError, match="mirror 'orders': airflow: a mapping is expected"):
        load_settings(path, "orders")


def test_the_spec_entry_carries_the_airflow_mapping_read_with_the_worker_config(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(SPEC)
    entries = {e.name: e for e in load_entries(path)}
    assert entries["plain"].airflow == {"worker-retries": 5, "pause-check-interval-s": 5}
    assert entries["orders"].airflow["unpaused"] is True and entries["orders"].airflow["worker-retries"] == 1


def test_kafka_hook_settings_from_connection_extras(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_OK", json.dumps({
        "conn_type": "kafka", "extra": {"bootstrap.servers": "h:9092", "security.protocol": "plaintext",
                                        "max.poll.records": "10", "linger.ms": 7}}))
    hook = KafkaHook("kafka_ok")
    assert hook.client_settings() == {"bootstrap.servers": "h:9092", "security.protocol": "plaintext", "linger.ms": "7"}
    assert hook.admin_config() == {"bootstrap.servers": "h:9092", "security.protocol": "plaintext"}
    consumer = hook.consumer_config("g1")
    assert consumer["group.id"] == "g1" and consumer["enable.auto.commit"] == "false"
    assert hook.producer_config()["acks"] == "all"


def test_kafka_hook_takes_sasl_credentials_from_the_connection_login_and_password(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SASL", json.dumps({
        "conn_type": "kafka", "login": "mirror", "password": "s3cret-pw",
        "extra": {"bootstrap.servers": "h:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}}))
    settings = KafkaHook("kafka_sasl").client_settings()
    assert settings["sasl.username"] == "mirror" and settings["sasl.password"] == "s3cret-pw"
    assert settings["sasl.mechanisms"] == "SCRAM-SHA-512"
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_NOSASL", json.dumps({
        "conn_type": "kafka", "login": "mirror", "password": "s3cret-pw", "extra": {"bootstrap.servers": "h:9092"}}))
    with pytest.raises(ConfigError, match="needs security.protocol SASL_SSL or SASL_PLAINTEXT"):
        KafkaHook("kafka_nosasl").client_settings()


@pytest.mark.parametrize("extra, message", [
    ({"security.protocol": "SSL"}, "Airflow connection 'kafka_bad': bootstrap.servers is required in the extras"),
    ({"bootstrap.servers": "h:1", "no.such.key": "1"}, "Airflow connection 'kafka_bad': unknown key no.such.key"),
])
def test_kafka_hook_refuses_bad_extras(monkeypatch, extra, message):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_BAD", json.dumps({"conn_type": "kafka", "extra": extra}))
    hook = KafkaHook("kafka_bad")
    with pytest.raises(ConnectionConfigError if "bootstrap" in message else Exception, match=message):
        hook.consumer_config("g")
    ok, text = hook.test_connection()
    assert not ok and message in text


def test_schema_registry_hook_url_and_basic_auth(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_REG", json.dumps({
        "conn_type": "http", "host": "reg.local", "port": 8081, "login": "u", "password": "p",
        "extra": {"path": "/apis/ccompat/v7", "allow-insecure": ["http-registry"]}}))
    assert SchemaRegistryHook("reg").client_config() == {
        "url": "http://reg.local:8081/apis/ccompat/v7", "basic.auth.user.info": "u:p", "timeout": 30,
        "retries.wait.ms": 200}
    monkeypatch.setenv("AIRFLOW_CONN_REG2", json.dumps({"conn_type": "http", "host": "https://r.example"}))
    assert SchemaRegistryHook("reg2").client_config() == {"url": "https://r.example", "timeout": 30,
                                                          "retries.wait.ms": 200}


def test_api_base_url_from_connection(monkeypatch):
    from airflow.sdk import BaseHook

    monkeypatch.setenv("AIRFLOW_CONN_API_T", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 8089,
                                                         "login": "admin", "password": "pw"}))
    api = AirflowApi.from_connection(BaseHook.get_connection("api_t"))
    assert (api.base_url, api.username, api.password) == ("http://127.0.0.1:8089", "admin", "pw")


def test_airflow_api_hook_gives_the_client_or_none_without_a_connection(monkeypatch):
    import logging

    from mirror_airflow.hooks.airflow_api import AirflowApiHook, api_from_connection

    monkeypatch.setenv("AIRFLOW_CONN_API_H", json.dumps({"conn_type": "http", "host": "https://af.example",
                                                         "login": "ops", "password": "pw"}))
    api = AirflowApiHook("api_h").get_conn()
    assert (api.base_url, api.username) == ("https://af.example", "ops")
    assert api_from_connection("api_h", logging.getLogger("t")).base_url == "https://af.example"
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_API", raising=False)
    assert api_from_connection("no_such_api", logging.getLogger("t")) is None


def test_render_writes_checks_and_removes_stubs(tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "dags"
    assert sorted(render(spec, out)) == ["write mirror__orders.py", "write mirror__plain.py"]
    assert render(spec, out, check=True) == []
    assert "mirror_dags('orders')" in (out / stub_name("orders")).read_text()
    (out / "hand_written.py").write_text("x = 1\n")
    spec.write_text(SPEC.replace("name: plain", "name: plain2"))
    assert sorted(render(spec, out, check=True)) == ["remove mirror__plain.py", "write mirror__plain2.py"]
    with pytest.raises(MirrorSpecError, match="plain2 have no DAG file"):
        check_rendered(out, spec)
    render(spec, out)
    assert sorted(p.name for p in out.iterdir()) == ["hand_written.py", "mirror__orders.py", "mirror__plain2.py"]
    check_rendered(out, spec)


def test_committed_dag_stubs_match_the_demo_spec():
    changes = render(ROOT / "config" / "mirrors.yaml", ROOT / "dags", check=True)
    assert changes == [], "run: make dags, or .venv/bin/python -m mirror_airflow.dag_factory render --spec config/mirrors.yaml --out dags/"


class FakeSparkSubmit:
    """Stands in for the spark-submit process the Spark hook starts: records its argv and environment, and
    plays the launcher's part (outcome file, report) with the exit code the test chose."""

    calls: list = []
    exit_code = 0
    report: dict | None = None

    def __init__(self, argv, **kwargs):
        FakeSparkSubmit.calls.append((list(argv), kwargs.get("env") or {}))
        args = argv[argv.index("--outcome"):]
        if self.report is not None and "--report" in args:
            Path(args[args.index("--report") + 1]).write_text(json.dumps(self.report))
        if self.report is not None and "--summary" in args:
            Path(args[args.index("--summary") + 1]).write_text(json.dumps(self.report))
        Path(args[1]).write_text(json.dumps({"job": args[2], "exit_code": self.exit_code}))
        application = (kwargs.get("env") or {}).get("MIRROR_SPARK_APPLICATION_FILE")
        if application:  # as spark_jobs.common.session.record_application
            Path(application).write_text(json.dumps({"app_id": "local-1", "master": "local[2]", "ui": None,
                                                     "event_log": "file:/e/local-1"}))
        self.stdout = iter(["spark-submit output\n"])

    def wait(self):
        return self.exit_code


@pytest.fixture
def spark_submit(monkeypatch):
    import airflow.providers.apache.spark.hooks.spark_submit as hook_module

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_T", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    monkeypatch.setattr(hook_module.subprocess, "Popen", FakeSparkSubmit)
    FakeSparkSubmit.calls, FakeSparkSubmit.exit_code, FakeSparkSubmit.report = [], 0, None
    return FakeSparkSubmit


def test_verify_submits_the_check_through_the_launcher(spark_submit, tmp_path, monkeypatch):
    import getpass

    from mirror_worker.redaction import SECRET_KEY_PATTERN
    from spark_jobs.common.cluster_security import redaction_regex

    # The hook passes its own environment on: a PYTHONPATH of the test run would look like one the operator set.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    op = ConsistencyCheckOperator(task_id="consistency_check", spec_path="/s/m.yaml", mirror_name="orders",
                                  conn_id="spark_t", report_dir=str(tmp_path))
    spark_submit.report = {"status": "ok", "totals": {"checked": 4, "missing": 0}}
    assert op.execute({})["summary"] == f"ok: checked=4 (report {op.report_path})"
    jars = sorted(str(p) for p in (ROOT / ".cache" / "spark" / "jars").glob("*.jar"))
    assert jars, "spark connector jars missing: make setup"
    report = op.report_path
    assert report.parent == tmp_path / "orders" and report.name.startswith("check-") and report.suffix == ".json"
    [(argv, env)] = spark_submit.calls
    outcome = argv[argv.index("--outcome") + 1]
    shipped = argv[argv.index("--py-files") + 1]
    submitted_jars = argv[argv.index("--jars") + 1].split(",")
    assert submitted_jars[:len(jars)] == jars
    assert any(j.endswith("/mirror-check.jar") for j in submitted_jars)   # the digest pass's JVM reader
    assert argv == [
        "spark-submit", "--master", "local[2]",
        "--conf", "spark.driver.extraJavaOptions=-XX:+UseParallelGC",
        # The driver on this interpreter even where the cluster's spark-defaults name another for its executors.
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.ui.enabled=false",  # local: no UI
        # Issue 46 item 5, on every master: the mirror's secret keys redacted, the UI's ACLs on.
        "--conf", f"spark.redaction.regex={redaction_regex({}, SECRET_KEY_PATTERN)}",
        "--conf", "spark.acls.enable=true", "--conf", f"spark.ui.view.acls={getpass.getuser()}",
        "--conf", f"spark.modify.acls={getpass.getuser()}",
        "--py-files", shipped, "--jars", ",".join(submitted_jars),
        "--driver-memory", "1g", "--name", "consistency_check-orders",
        str(ROOT / "plugins" / "mirror_airflow" / "spark_launcher.py"), "--outcome", outcome,
        "spark_jobs.consistency_check",
        "--config", "/s/m.yaml", "--mirror", "orders", "--report", str(report),
    ]
    assert not Path(outcome).exists() and not Path(shipped).exists()  # read, then removed
    application = env["MIRROR_SPARK_APPLICATION_FILE"]
    assert op.application["event_log"] == "file:/e/local-1" and not Path(application).exists()
    assert env["PYSPARK_PYTHON"] == sys.executable and env["PYTHONSAFEPATH"] == "1" and "PYTHONPATH" not in env
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # spark-submit of this venv


def test_without_a_checkout_the_check_is_submitted_with_the_connectors_coordinates_and_the_catchup_without(
        spark_submit, tmp_path, monkeypatch):
    """An installed package has no .cache/spark/jars beside it (issue 44 item 1): spark-submit resolves the connector
    at pyspark's version with Spark's own Ivy, what pyspark ships left out; the check's reader goes with --jars.
    The catch-up reads with librdkafka: neither."""
    import pyspark

    from spark_jobs.common import connector

    monkeypatch.setattr(connector, "CHECKOUT_JARS", tmp_path / "site-packages" / ".cache" / "spark" / "jars")
    monkeypatch.delenv("SPARK_KAFKA_JARS", raising=False)
    monkeypatch.delenv("MIRROR_CHECK_JAR", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))  # no spark-defaults.conf
    ConsistencyCheckOperator(task_id="consistency_check", spec_path="/s/m.yaml", mirror_name="orders",
                             conn_id="spark_t", report_dir=str(tmp_path)).execute({})
    CatchupOperator(task_id="catchup", spec_path="/s/m.yaml", mirror_name="orders", conn_id="spark_t",
                    report_dir=str(tmp_path)).execute({"params": {}})

    [(check, _), (catchup, _)] = spark_submit.calls
    assert check[check.index("--packages") + 1] == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
    assert check[check.index("--exclude-packages") + 1].split(",") == [
        e.format(scala="2.13") for e in connector.SHIPPED_BY_SPARK]
    assert check[check.index("--jars") + 1] == str(connector.CHECK_JAR)
    assert not {"--jars", "--packages", "--exclude-packages"} & set(catchup), catchup


def test_verify_of_an_empty_window_is_skipped_saying_nothing_to_check(spark_submit, tmp_path):
    """A check that read no record is no success: the task is skipped (not green) and says why."""
    from airflow.sdk.exceptions import AirflowSkipException

    from mirror_airflow.operators import spark
    from spark_jobs.check import report

    assert spark.NOTHING_TO_CHECK == report.NOTHING_TO_CHECK  # the plugin reads the status the job writes
    spark_submit.report = {"status": "nothing to check", "totals": {"checked": 0, "missing": 0},
                           "window": {"kind": "all"}}
    op = ConsistencyCheckOperator(task_id="consistency_check", spec_path="/s/m.yaml", mirror_name="orders",
                                  conn_id="spark_t", report_dir=str(tmp_path))
    with pytest.raises(AirflowSkipException, match=r"^nothing to check: the source held no record in the window "
                                                   r"\(report .*check-.*\.json\)$"):
        op.execute({})


@pytest.mark.parametrize("code, report, message", [
    (1, {"status": "inconsistent", "totals": {"missing": 2}}, "mirror 'orders' is inconsistent: inconsistent: missing=2"),
    (1, {"status": "inconsistent", "totals": {"checked": 9, "missing": 1}, "modes": {
        "b": {"mode": "compacted", "reason": "c"}, "n": {"mode": "records", "reason": "r"}, "a": {"mode": "compacted"}}},
     r"mirror 'orders' is inconsistent: inconsistent: checked=9, missing=1; latest value per key: a, b \(report "),
    (2, None, r"mirror 'orders': the consistency check did not complete \(exit 2, bad input\)$"),
    (3, None, r"mirror 'orders': the consistency check did not complete \(exit 3, failed while it ran\)$"),
])
def test_verify_tells_the_checks_exit_codes_apart(spark_submit, tmp_path, code, report, message):
    spark_submit.exit_code, spark_submit.report = code, report
    op = ConsistencyCheckOperator(task_id="consistency_check", spec_path="/s/m.yaml", mirror_name="orders",
                                  conn_id="spark_t", report_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match=message):
        op.execute({})


CATCHUP_SUMMARY = {"records": 1200, "seconds": 14.2, "msgs_per_s": 85, "copy_phase_msgs_per_s": 600,
                   "spark_startup_s": 9.1, "ranges": [{"partition": 0}, {"partition": 1}], "open_transactions": [],
                   "data_loss": [{"reason": "t[0]: records 10..19 were deleted from the source (retention)"}]}


@pytest.mark.parametrize("code, summary, message", [
    (1, None, r"the catch-up failed \(nothing committed past what was delivered\) \(exit 1\)$"),
    (2, None, r"the catch-up refused its input \(exit 2\)$"),
    (3, CATCHUP_SUMMARY, r"the catch-up halted on data loss \(exit 3\): 1,200 records in 14.2 s .*; data loss: "
                         r"t\[0\]: records 10..19 were deleted from the source \(retention\)$"),
])
def test_catchup_tells_the_jobs_exit_codes_apart(spark_submit, tmp_path, code, summary, message):
    spark_submit.exit_code, spark_submit.report = code, summary
    op = CatchupOperator(task_id="catchup", spec_path="/s.yaml", mirror_name="m", conn_id="spark_t",
                         report_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match=message):
        op.execute({"params": {"topics": "a"}})
    [(argv, _)] = spark_submit.calls
    assert argv[argv.index("--outcome") + 2:] == ["spark_jobs.catchup", "--config", "/s.yaml",
                                                   "--mirror", "m", "--summary", str(op.summary_path), "--topics", "a"]


def test_catchup_succeeds_when_the_job_exits_0_and_shows_its_summary(spark_submit, tmp_path, capfd):
    spark_submit.report = {**CATCHUP_SUMMARY, "data_loss": []}
    op = CatchupOperator(task_id="catchup", spec_path="/s.yaml", mirror_name="m", conn_id="spark_t",
                         report_dir=str(tmp_path))
    result = op.execute({"params": {}})
    assert result["records"] == 1200 and result["summary_path"] == str(tmp_path / "m" / op.summary_path.name)
    out, err = capfd.readouterr()
    assert ("catch-up: 1,200 records in 14.2 s (85 msgs/s end to end, 600 msgs/s copying; Spark start-up 9.1 s), "
            "2 partition(s)") in out + err


def test_catchup_line_of_a_backlog_copied_before_spark_was_up():
    from mirror_airflow.operators.spark import catchup_line

    line = catchup_line({**CATCHUP_SUMMARY, "spark_startup_s": None, "data_loss": []})
    assert line == ("1,200 records in 14.2 s (85 msgs/s end to end, 600 msgs/s copying; copied before Spark was up), "
                    "2 partition(s)")


@pytest.mark.parametrize("body, code", [
    ("import sys; sys.exit(3)", 3),
    ("print('done')", 0),
    ("raise RuntimeError('boom')", 1),
    ("import sys; sys.exit('bad input')", 1),
])
def test_spark_launcher_records_the_jobs_exit_code(tmp_path, body, code):
    """The launcher runs the job's module as `python -m` would, as spark-submit starts it (PYTHONSAFEPATH from
    the operator's environment), the module found on the path spark-submit gives it (--py-files)."""
    import os
    import subprocess

    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a_job.py").write_text(
        "import sys\nassert __name__ == '__main__' and sys.argv[1:] == ['--x', '1'], sys.argv\n" + body + "\n")
    outcome = tmp_path / "outcome.json"
    launcher = ROOT / "plugins" / "mirror_airflow" / "spark_launcher.py"
    env = {**os.environ, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(tmp_path / "jobs")}
    done = subprocess.run([sys.executable, str(launcher), "--outcome", str(outcome), "a_job", "--x", "1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == code, done.stderr
    assert json.loads(outcome.read_text()) == {"job": "a_job", "exit_code": code}


def test_the_project_zip_holds_the_jobs_and_the_workers_code(tmp_path):
    import zipfile

    from spark_jobs.common.session import project_zip

    names = zipfile.ZipFile(project_zip(tmp_path / "code.zip")).namelist()
    assert {"spark_jobs/__init__.py", "spark_jobs/api.py", "spark_jobs/catchup/__main__.py", "spark_jobs/catchup/job.py",
            "spark_jobs/check/__main__.py", "spark_jobs/check/job.py", "spark_jobs/common/session.py",
            "spark_jobs/consistency_check.py", "mirror_worker/__init__.py", "mirror_worker/__main__.py"} <= set(names)
    assert any(n.startswith("mirror_worker/") and n.count("/") == 2 for n in names)  # its sub-packages too
    assert not [n for n in names if n.endswith((".pyc", ".jar")) or "__pycache__" in n]


@pytest.mark.parametrize("params, tail", [
    ({}, []),
    ({"topics": "a,b", "from_offsets": "", "from_timestamp": ""}, ["--topics", "a,b"]),
    ({"from_offsets": "a:0:5"}, ["--from-offsets", "a:0:5"]),
    ({"topics": " a ", "from_timestamp": "2026-11-01T00:00:00Z"}, ["--topics", "a", "--from-timestamp", "2026-11-01T00:00:00Z"]),
    ({"driver_copy_limit": "0"}, ["--driver-copy-limit", "0"]),
])
def test_catchup_arguments_from_params(params, tail, tmp_path):
    op = CatchupOperator(task_id="catchup", spec_path="/s.yaml", mirror_name="m", report_dir=str(tmp_path))
    args = op.job_args({"params": params})
    assert args == ["--config", "/s.yaml", "--mirror", "m", "--summary", str(op.summary_path), *tail]
    assert op.summary_path.parent == tmp_path / "m" and op.summary_path.name.startswith("catchup-")


def test_catchup_refuses_offsets_and_timestamp_together(tmp_path):
    op = CatchupOperator(task_id="catchup", spec_path="/s.yaml", mirror_name="m", report_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not both"):
        op.job_args({"params": {"from_offsets": "a:0:1", "from_timestamp": "1"}})


class _Ti:
    def __init__(self, value):
        self.value = value

    def xcom_pull(self, task_ids):
        assert task_ids == "discover"
        return self.value


def _registry_spec(tmp_path, registries: bool) -> str:
    extra = ', schema-registry-url: "http://127.0.0.1:1/apis/ccompat/v7"' if registries else ""
    path = tmp_path / "r.yaml"
    path.write_text(f"""
groups:
  - name: g
    source: {{kafka: {{bootstrap.servers: "127.0.0.1:1"}}{extra}}}
    destination: {{kafka: {{bootstrap.servers: "127.0.0.1:2"}}{extra}}}
    mirrors: [{{name: m, whitelist: "a|b"}}]
""")
    return str(path)


def test_sync_schemas_without_registries_logs_and_succeeds(tmp_path, monkeypatch):
    from mirror_airflow.operators.schemas import SyncSchemasOperator

    monkeypatch.setitem(sys.modules, "mirror_worker.schemas.sync", None)  # not even imported
    op = SyncSchemasOperator(task_id="sync_schemas", spec_path=_registry_spec(tmp_path, False), mirror_name="m")
    assert op.execute({"ti": _Ti({"a": "a"})}) is None


def test_sync_schemas_calls_the_library_with_the_discovered_topics(tmp_path, monkeypatch):
    import types

    from mirror_airflow.operators.schemas import SyncSchemasOperator

    calls = []

    from mirror_worker.schemas.sync import SchemaSyncReport

    module = types.ModuleType("mirror_worker.schemas.sync")
    module.sync_mirror_schemas = lambda config, topics: (
        calls.append((config.name, topics)) or SchemaSyncReport(dict(module.conflicts), 1, list(topics)))
    module.conflicts = {}
    monkeypatch.setitem(sys.modules, "mirror_worker.schemas.sync", module)
    op = SyncSchemasOperator(task_id="sync_schemas", spec_path=_registry_spec(tmp_path, True), mirror_name="m")
    assert op.execute({"ti": _Ti({"b": "x.b", "a": "x.a"})}) == {"ok": True, "conflicts": {}, "registered": 1,
                                                               "topics": ["a", "b"]}
    assert calls == [("m", ["a", "b"])]
    module.conflicts = {"a": "incompatible"}
    with pytest.raises(RuntimeError, match="schema conflicts on 1 topic.*first a: incompatible"):
        op.execute({"ti": _Ti({"a": "x.a"})})
