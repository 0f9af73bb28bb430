"""The worker gets only the environment it needs, not the Airflow task's (issue 46 item 4): the database URL, the
JWT and API secrets and the fernet key stay in Airflow; MIRROR_SECRETS_DIRS reaches the worker and spark-submit."""

from __future__ import annotations

import pytest

from mirror_airflow.supervisor import worker_env

AIRFLOW_SECRETS = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:Db-Pw-1@db/airflow",
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-secret-value",
    "AIRFLOW__API__SECRET_KEY": "api-secret-value",
    "AIRFLOW__CORE__FERNET_KEY": "fernet-key-value",
    "AIRFLOW_CONN_AIRFLOW_API": "http://admin:Adm-Pw@api:8080",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "SOURCE_PASSWORD": "Src-Pw-1",
}
NEEDED = {
    "PATH": "/usr/bin:/bin", "HOME": "/home/airflow", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
    "PYTHONPATH": "/opt/mirror", "JAVA_HOME": "/usr/lib/jvm/java", "KRB5_CONFIG": "/etc/krb5.conf",
    "KRB5CCNAME": "FILE:/tmp/krb5cc_50000", "SSL_CERT_FILE": "/etc/ssl/certs/ca.pem", "SSL_CERT_DIR": "/etc/ssl/certs",
    "MIRROR_SECRETS_DIRS": "/run/secrets", "MIRROR_LOG_LEVEL": "DEBUG", "HTTPS_PROXY": "http://proxy:3128",
    "NO_PROXY": "localhost",
}


@pytest.fixture
def environment(monkeypatch):
    for name in list(__import__("os").environ):
        monkeypatch.delenv(name)
    for name, value in {**AIRFLOW_SECRETS, **NEEDED}.items():
        monkeypatch.setenv(name, value)


def test_the_worker_gets_what_it_needs_and_none_of_airflows_secrets(environment):
    env = worker_env()
    assert env == {**NEEDED, "PYTHONUNBUFFERED": "1", "PYTHONSAFEPATH": "1"}


def test_env_placeholders_of_the_spec_reach_the_worker_only_while_it_may_resolve_them(environment, tmp_path, monkeypatch):
    from mirror_airflow.supervisor import spec_env_names

    spec = tmp_path / "mirrors.yaml"
    spec.write_text('source: {kafka: {sasl.password: "${env:SOURCE_PASSWORD}", x: "${env::OTHER}"}}\n')
    assert spec_env_names(spec) == {"SOURCE_PASSWORD", "OTHER"}
    # With MIRROR_SECRETS_DIRS the worker refuses ${env:...}: nothing to pass.
    assert "SOURCE_PASSWORD" not in worker_env(spec_env=spec_env_names(spec))
    monkeypatch.delenv("MIRROR_SECRETS_DIRS")
    env = worker_env(spec_env=spec_env_names(spec))
    assert env["SOURCE_PASSWORD"] == "Src-Pw-1" and "OTHER" not in env  # named, but not set here
    assert not set(AIRFLOW_SECRETS) - {"SOURCE_PASSWORD"} & set(env)
    assert spec_env_names(tmp_path / "missing.yaml") == set()


def test_the_worker_operator_starts_the_worker_with_that_environment(environment, monkeypatch):
    import mirror_airflow.supervisor as supervisor

    started = {}

    class Popen:
        def __init__(self, argv, env, **kwargs):
            started.update(env=env)
            raise RuntimeError("stop here")

    monkeypatch.setattr(supervisor.subprocess, "Popen", Popen)
    with pytest.raises(RuntimeError, match="stop here"):
        supervisor.WorkerProcess(["python", "-m", "mirror_worker"], __import__("logging").getLogger("t"))
    assert "AIRFLOW__CORE__FERNET_KEY" not in started["env"] and started["env"]["MIRROR_SECRETS_DIRS"] == "/run/secrets"


def test_spark_submit_gets_the_secrets_directories(monkeypatch):
    from mirror_airflow.operators.spark import ConsistencyCheckOperator, spark_env

    monkeypatch.setenv("MIRROR_SECRETS_DIRS", "/run/secrets")

    assert spark_env()["MIRROR_SECRETS_DIRS"] == "/run/secrets"
    op = ConsistencyCheckOperator(task_id="verify", spec_path="s.yaml", mirror_name="m")
    assert op.env_vars["MIRROR_SECRETS_DIRS"] == "/run/secrets"
