"""The local stack's lines (`make run`, `make stack-up`: `python -m devstack`, `python -m devstack.demo`), each made
by a scene for test_troubleshooting.py: the stack's part that fails, with what it looks for made absent (a folder
without jars, no Java), printed as `python -m devstack` prints a StackError; nothing is started."""

from __future__ import annotations

import sys
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


CASES = {
    "devstack: Kafka jars missing in …: run `make setup`": case(kafka_jars_missing, exit_code=1),
    "devstack: schema registry missing at …: run `make setup`": case(registry_missing, exit_code=1),
    "devstack: no Java …+ runtime found (looked at JAVA_HOME, PATH and /usr/lib/jvm); install OpenJDK … or newer": case(
        no_java, exit_code=1),
    "devstack: airflow is missing at …: run `make setup`": case(airflow_missing, exit_code=1),
    "demo: the local stack is not running; start it with `make stack-up`": case(demo_without_stack, exit_code=1),
}
