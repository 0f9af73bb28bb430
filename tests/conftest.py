"""Session fixtures: the real local stack, started once per test session.

If a stack is already running (`make stack-up`, or DEVSTACK_ROOT pointing at one), the suite uses it
and leaves it running; otherwise it starts its own under a temporary directory and stops it at the end.
"""

from __future__ import annotations

import uuid

import pytest

from devstack import Stack, paths
from tests.airflow_support import airflow_api_server, airflow_db  # noqa: F401  (first: configures Airflow before it is imported)


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    running = Stack(paths.default_stack_dir())
    if running.is_up():
        yield running
        return
    own = Stack(tmp_path_factory.mktemp("stack"))
    try:
        own.up()
        yield own
    finally:
        own.down()


@pytest.fixture
def topic_name():
    """A fresh topic name per call: tests never share topics."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole session (start-up costs seconds on two cores)."""
    from spark_jobs.session import create_session

    session = create_session("kafka-mirror-tests", extra_conf={"spark.ui.enabled": "false"})
    yield session
    session.stop()
