"""The local stack's lines (`make run`, `make stack-up`: `python -m devstack`, `python -m devstack.demo`), each made
by a scene for test_troubleshooting.py: the stack's part that fails, with what it looks for made absent (a folder
without jars, no Java), printed as `python -m devstack` prints a StackError; nothing is started."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from tests.unit.troubleshooting_cases import case


def devstack(failing) -> int:
    """`failing()` raises the StackError: its line and exit code as devstack/__main__.py gives them."""
    from devstack.errors import StackError

    try:
        failing()
    except StackError as exc:
        print(f"devstack: {exc}", file=sys.stderr)
        return 1
    return 0


def kafka_jars_missing() -> int:
    from devstack import paths
    from devstack.kafka import KafkaNode

    with mock.patch.object(paths, "KAFKA_LIBS", Path("no-jars")):
        return devstack(lambda: KafkaNode._java_argv(SimpleNamespace(), "kafka.Kafka"))


def registry_missing() -> int:
    from devstack.registry import RegistryNode

    with mock.patch("devstack.registry.registry_jar", lambda: Path("no-registry.jar")):
        return devstack(lambda: RegistryNode._argv(SimpleNamespace()))


def no_java() -> int:
    from devstack.jdk import find_java

    with mock.patch("devstack.jdk._candidates", list):
        return devstack(lambda: find_java(17))


def airflow_missing() -> int:
    from devstack.airflow import airflow_bin

    with mock.patch.object(sys, "executable", str(Path("no-venv/bin/python").absolute())):
        return devstack(airflow_bin)


def demo_without_stack() -> int:
    """`python -m devstack.demo` (`make run`'s last step) with no stack in its folder."""
    from devstack import demo, paths

    with mock.patch.object(paths, "default_stack_dir", lambda: Path("no-stack")):
        return demo.main()


def stopped(process):
    """`process` (a stack part's ManagedProcess) as one that is not running, or exited."""
    return mock.patch.multiple(process, is_running=lambda: False, exited=lambda: True,
                               exit_report=lambda: "pid 4242 exited with status 1")


def kafka_node(*, taken: bool = False, formats: bool = True):
    """A broker of the stack in ./node, its storage format giving `formats`, its ports taken by others or free."""
    from devstack.kafka import KafkaNode

    node = KafkaNode("source", Path("node"))
    result = subprocess.CompletedProcess([], 0 if formats else 1, stdout="Error: the cluster id is not valid\n")
    patches = mock.patch.object(KafkaNode, "_run_java", lambda *_: result), \
        mock.patch("devstack.kafka.is_listening", lambda port: taken)
    return node, patches


def kafka_format_fails() -> int:
    node, (java, listening) = kafka_node(formats=False)
    with java, listening:
        return devstack(node.configure)


def kafka_port_taken() -> int:
    node, (java, listening) = kafka_node(taken=True)
    with java, listening:
        return devstack(node.start)


def kafka_exits() -> int:
    node, (java, listening) = kafka_node()
    with java, listening, stopped(node.process):
        node.configure()
        return devstack(lambda: node.wait_ready(1))


def kafka_silent() -> int:
    node, (java, listening) = kafka_node()
    with java, listening, mock.patch.object(node.process, "is_running", lambda: True):
        node.configure()
        return devstack(lambda: node.wait_ready(0))


def registry_node(taken: bool = False, running: bool = False):
    from devstack.registry import RegistryNode

    node = RegistryNode("source", Path("registry"))
    return node, mock.patch("devstack.registry.is_listening", lambda port: taken), \
        mock.patch.object(node.process, "is_running", lambda: running)


def registry_port_taken() -> int:
    node, listening, running = registry_node(taken=True)
    with listening, running:
        return devstack(node.start)


def registry_exits() -> int:
    node, listening, running = registry_node()
    with listening, running:
        node.configure()
        return devstack(lambda: node.wait_ready(1))


def registry_silent() -> int:
    node, listening, running = registry_node(running=True)
    with listening, running:
        node.configure()
        return devstack(lambda: node.wait_ready(0))


def airflow(spec: bool = True):
    from devstack.airflow import Airflow
    from devstack.stack import Stack

    if spec:
        Path("mirrors.yaml").write_text("groups: []\n")
    return Airflow(Stack(Path("stack")), root=Path("."), spec=Path("mirrors.yaml"), dags_folder=Path("dags"))


def airflow_without_spec() -> int:
    return devstack(airflow(spec=False).start)


def airflow_exits() -> int:
    af = airflow()
    with stopped(af.process):
        return devstack(lambda: af.wait_ready(1))


def airflow_unhealthy() -> int:
    af = airflow()
    with mock.patch.object(af.process, "exited", lambda: False), \
            mock.patch("devstack.airflow.component_health", lambda url: {"scheduler": {"status": "unhealthy"}}):
        af.node_file.parent.mkdir(parents=True)
        af.node_file.write_text('{"api_port": 1}')
        return devstack(lambda: af.wait_ready(0))


def dags(failed_file: str) -> int:
    """`python -m devstack airflow` waits for the demo's DAGs: none parsed yet, `failed_file` (if any) listed
    among Airflow's import errors."""
    from devstack.airflow import AirflowApi

    errors = [{"filename": failed_file, "stack_trace": "MirrorSpecError: …"}] if failed_file else []
    api = AirflowApi("http://127.0.0.1:1", "admin", "pw")
    with mock.patch.multiple(api, dag=lambda dag_id: None, import_errors=lambda: errors):
        return devstack(lambda: api.wait_for_dags(["mirror__demo"], timeout=5 if errors else 0))


def worker_never_joins() -> int:
    """The demo's worker (or its Airflow DAG run) does not join the mirror's group in time."""
    from devstack import demo

    class Stack:
        root = Path(".")

        def __init__(self, _root):
            pass

        def is_up(self):
            return True

        def __getitem__(self, _name):
            return SimpleNamespace(kafka=SimpleNamespace(bootstrap_servers="127.0.0.1:1"))

    with mock.patch.multiple(demo, Stack=Stack, ensure_topic=mock.DEFAULT, log_to=mock.DEFAULT,
                             _airflow_mirror=lambda stack: None, start_mirror=lambda stack: ("-", "-"),
                             wait_for_worker=lambda *args: False):
        return demo.main()


def stream_round_fails() -> str:
    """The demo's stream (a stack service) cannot produce a round: said in its log, the next round tried."""
    from confluent_kafka import KafkaException

    from devstack.stream import run

    stop = threading.Event()

    def produce(count):
        stop.set()
        raise KafkaException("demo: not every order was delivered")

    run(produce, 1, stop, interval_s=0)
    return STREAM_GOES_ON


def process_survives_kill() -> int:
    """`make stack-down`: a part of the stack that outlives SIGKILL (a process stuck in the kernel)."""
    from devstack.process import ManagedProcess

    process = ManagedProcess("kafka[source]", Path("node"))
    with mock.patch.multiple(process, pid=lambda: 4242, _wait_gone=lambda *args: False), \
            mock.patch("devstack.process._tree_groups", lambda pid: set()):
        return devstack(process.stop)


STREAM_GOES_ON = "none: the stream goes on"
CASES = {
    "devstack: Kafka jars missing in …: run `make setup`": case(kafka_jars_missing, exit_code=1),
    "devstack: schema registry missing at …: run `make setup`": case(registry_missing, exit_code=1),
    "devstack: no Java …+ runtime found (looked at JAVA_HOME, PATH and /usr/lib/jvm); install OpenJDK … or newer": case(
        no_java, exit_code=1),
    "devstack: airflow is missing at …: run `make setup`": case(airflow_missing, exit_code=1),
    "demo: the local stack is not running; start it with `make stack-up`": case(demo_without_stack, exit_code=1),
    "devstack: kafka[…]: storage format failed: …": case(kafka_format_fails, exit_code=1),
    "devstack: kafka[…]: port … is taken by another process": case(kafka_port_taken, exit_code=1),
    "devstack: kafka[…] exited during start-up; see …": case(kafka_exits, exit_code=1),
    "devstack: kafka[…] did not answer on … within …s; see …": case(kafka_silent, exit_code=1),
    "devstack: registry[…]: port … is taken by another process": case(registry_port_taken, exit_code=1),
    "devstack: registry[…] exited during start-up; see …": case(registry_exits, exit_code=1),
    "devstack: registry[…] did not answer on …/subjects within …s; see …": case(registry_silent, exit_code=1),
    "devstack: airflow: mirror spec … does not exist (write it before starting)": case(
        airflow_without_spec, exit_code=1),
    "devstack: airflow exited during start-up (…); see …": case(airflow_exits, exit_code=1),
    "devstack: airflow did not become healthy on … within …s (last health: …); see …": case(
        airflow_unhealthy, exit_code=1),
    "devstack: airflow: DAG import errors: …": case(dags, "dags/mirror_demo.py", exit_code=1),
    "devstack: airflow: DAGs not parsed within …s: …": case(dags, "", exit_code=1),
    "demo: no worker joined the mirror's group … within …s; see its logs": case(worker_never_joins, exit_code=1),
    "demo-stream: round not produced: …": case(stream_round_fails, exit_code=STREAM_GOES_ON),
    "devstack: … (pid …) did not exit after SIGKILL": case(process_survives_kill, exit_code=1),
}
