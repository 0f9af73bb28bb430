"""Session fixtures: the real local stack, started once per test session.

If a stack is already running (`make stack-up`, or DEVSTACK_ROOT pointing at one), the suite uses it
and leaves it running; otherwise it starts its own under a temporary directory and stops it at the end.

`make test` runs the suite in a few processes (pytest-xdist): most integration tests spend their time
waiting for brokers, groups and Airflow, not computing. The processes share one stack (the first that
needs it starts it; the controller stops it), and three kinds of test stay together on one process each
(`pytest_xdist_make_scheduler`): those that start Spark (marker `spark`, the `spark` or `spark_cluster`
fixture), in two groups, the second handed out once the fault and browser groups have ended (LATE_SPARK_GROUP) and
holding every test on the run's one standalone cluster (`spark_cluster`); those using Airflow's metadata DB (one
`airflow db migrate` and api-server), and the browser tests with the Celery test (each starts an Airflow of its own).
The fault tests (marker `faults`) also stay on one process: they share two three-node clusters of their own
(`fault_stack`), started by that process once. No test stops a shared server: those that stop or kill a destination
broker have one of their own (`outage_stack`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import uuid
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest

from devstack import Stack, paths
from devstack.kafka_cluster import FaultStack
from devstack.process import STARTED_LOG_ENV, kill_started
from tests.airflow_support import airflow_api_server, airflow_db  # noqa: F401  (first: configures Airflow before it is imported)
from tests.kafka_util import private_kafka

# Set by the controller of an xdist run before it starts its workers (they inherit it): their shared folder.
SHARED_ENV = "KAFKA_MIRROR_TEST_SHARED"


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _worker_shared(config) -> Path | None:
    """The run's shared folder, in a worker process of an xdist run (None elsewhere)."""
    shared = os.environ.get(SHARED_ENV)
    return Path(shared) if shared and _is_xdist_worker(config) else None


def pytest_configure(config):
    if not _is_xdist_worker(config) and getattr(config.option, "numprocesses", None):
        os.environ[SHARED_ENV] = tempfile.mkdtemp(prefix="kafka-mirror-tests-")
    shared = _worker_shared(config)
    if shared:  # the servers this process starts are noted, for _kill_left_running
        os.environ[STARTED_LOG_ENV] = str(shared / f"started-{config.workerinput['workerid']}.log")


def _kill_left_running(shared: Path, worker: str = "*") -> None:
    """SIGKILL the servers a test process started and left running (the shared stack's aside): after it
    crashed (pytest-timeout ends a test process that overran; its fixtures' teardowns never ran), six brokers of
    a fault stack went on taking the CPU the rest of the run needed, the next test overran too, and a CI run
    crashed two processes this way and ran out of its time."""
    for log in shared.glob(f"started-{worker}.log"):
        for home in kill_started(log, keep=shared / "stack"):
            print(f"\nkilled a server left running by {log.stem.removeprefix('started-')}: {home}", flush=True)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist, in the controller: a test process went down; one that crashed leaves its servers behind."""
    shared = os.environ.get(SHARED_ENV)
    if error and shared:
        _kill_left_running(Path(shared), node.gateway.id)


def pytest_unconfigure(config):
    shared = os.environ.get(SHARED_ENV)
    if _is_xdist_worker(config) or not shared:
        return
    # Every worker has ended: stop what one left running, and the stack one of them started (if any), then
    # drop the folder.
    _kill_left_running(Path(shared))
    if (Path(shared) / "stack").is_dir():
        Stack(Path(shared) / "stack").down()
    shutil.rmtree(shared, ignore_errors=True)
    del os.environ[SHARED_ENV]


# The Spark tests were one group, the run's longest chain by far (57 of a 61-minute run, the other processes idle
# from minute 36). These files, ~40 % of its time, are a second Spark group that starts only once every other
# test has been handed out (GroupScheduling): two Sparks beside the fault tests and the browser tests took the
# machine to load 33 and failed three timing-bound tests.
LATE_SPARK_GROUP = "spark-late"
# The late Spark group waits for these: beside the fault clusters and the browser tests' own Airflow, a second
# Spark took the machine to load 33. Handed out only once nothing else was left, it ran alone for the last 18
# of 46 minutes (stop 51's full run; 64 minutes in CI).
LATE_AFTER_GROUPS = ("faults", "e2e")
# Stop 53's full run (52.5 min): the first Spark group ran 43.6 min from the start, the late group 32.9 min from
# minute 18.6 (when the fault tests ended) to 51.6, the other processes idle from minute 38. Both groups started
# a Spark cluster (spark_cluster: 51 s under load, then three JVMs idle to the end of the run): the two files that
# use it are late now, and test_consistency_check.py, _schemas and _transactions (9.8 min in that run) first;
# by that run's durations the first group ends near minute 47.4, the late one near 46.9. Every test that uses the
# cluster is late (_group), wherever it is: test_spark_cluster.py, test_spark_security.py, test_package.py's jobs.
LATE_SPARK_FILES = ("test_consistency_check_compacted.py", "test_consistency_check_digests.py",
                    "test_consistency_check_empty.py")


class LateLast(OrderedDict):
    """xdist's work queue (xdist takes the next scope with popitem(last=False)). The late group is handed out
    next once `ready()` says the groups it must not overlap are done, else only once nothing else is left."""

    def __init__(self, *args, ready=lambda: False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ready = ready

    def popitem(self, last: bool = True):
        if not last and LATE_SPARK_GROUP in self:
            if self.ready():
                return LATE_SPARK_GROUP, self.pop(LATE_SPARK_GROUP)
            scope = next((s for s in self if s != LATE_SPARK_GROUP), None)
            if scope is not None:
                return scope, self.pop(scope)
        return super().popitem(last)


def _group(item) -> str | None:
    if item.get_closest_marker("e2e") or item.get_closest_marker("celery"):
        # The browser tests, then the Celery test: one Airflow of their own at a time.
        return "e2e"
    if "spark_cluster" in item.fixturenames:
        # The run's one standalone cluster: every test that submits to it, wherever it is (test_package's installed
        # jobs had a cluster of their own beside it, 370-418 s of a loaded run, started and stopped for one test).
        return LATE_SPARK_GROUP
    if "spark" in item.fixturenames or item.get_closest_marker("spark"):
        return LATE_SPARK_GROUP if item.path.name in LATE_SPARK_FILES else "spark"
    # Before "airflow": a fault test that also runs Airflow (the lag sensor under a cut) must not start a
    # second pair of three-node clusters in the Airflow group's process.
    if item.get_closest_marker("faults") or "fault_stack" in item.fixturenames:
        return "faults"
    if "airflow_db" in item.fixturenames or "airflow_api_server" in item.fixturenames:
        return "airflow"
    if "packaged" in item.fixturenames:  # the venv with the wheel (tests/integration/test_package.py; built once a
        return "package"                 # run, `once_per_run`, and used by the late group's cluster test too)
    return None


def pytest_collection_modifyitems(config, items):
    """A worker writes the groups of its items for the controller's scheduler (every worker collects the
    same items). Not xdist_group marks: xdist 3.8 tags them onto node ids in a way pytest 9 ignores.
    The late Spark group's tests of the installed wheel go last (a stable sort, the same in every worker): their
    venv is built by the package group when it comes first (once_per_run), and the late group waits for it only
    if it reaches them before the build is done."""
    items.sort(key=lambda item: _group(item) == LATE_SPARK_GROUP and "packaged" in item.fixturenames)
    shared = _worker_shared(config)
    if shared:
        groups = {item.nodeid: group for item in items if (group := _group(item))}
        target = shared / f"groups-{config.workerinput['workerid']}.json"
        target.with_suffix(".tmp").write_text(json.dumps(groups))
        target.with_suffix(".tmp").replace(target)


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with our groups as scopes: a group's tests go to one worker, in collection
    order; every other test is a scope of its own. The workers wrote the groups before they reported
    their collections, and the scheduler splits scopes only once every collection is in."""
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        _groups: dict | None = None

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.workqueue = LateLast(ready=self._late_may_start)

        def _late_may_start(self) -> bool:
            """Every group of LATE_AFTER_GROUPS handed out and run to its end (or absent from this run)."""
            if any(group in self.workqueue for group in LATE_AFTER_GROUPS):
                return False
            return all(all(work.get(group, {}).values()) for work in self.assigned_work.values()
                       for group in LATE_AFTER_GROUPS)

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = {}
                for path in Path(shared).glob("groups-*.json"):
                    self._groups.update(json.loads(path.read_text()))
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


@contextlib.contextmanager
def _file_lock(path: Path):
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


@pytest.fixture(scope="session")
def stack(request, tmp_path_factory) -> Stack:
    running = Stack(paths.default_stack_dir())
    if running.is_up():
        yield running
        return
    shared = _worker_shared(request.config)
    if shared:
        # One stack for every worker of the run: the first to need it starts it, the controller stops it.
        own = Stack(shared / "stack")
        with _file_lock(shared / "stack.lock"):
            own.up()  # a no-op when it is up
        yield own
        return
    own = Stack(tmp_path_factory.mktemp("stack"))
    try:
        own.up()
        yield own
    finally:
        own.down()


@pytest.fixture(scope="session")
def once_per_run(request, tmp_path_factory):
    """`once(name, build) -> folder`: the folder that `build(folder)` filled, built once for the whole run. In a run
    of several test processes the first that asks builds it in the run's shared folder while the others wait, then
    reuse it (tests of two scheduling groups need test_package's venv: a build of 320 s under a full run's load)."""
    shared = _worker_shared(request.config)

    def once(name: str, build) -> Path:
        if not shared:
            folder = tmp_path_factory.mktemp(name)
            build(folder)
            return folder
        folder, built = shared / name, shared / f"{name}.built"
        with _file_lock(shared / f"{name}.lock"):
            if not built.is_file():
                shutil.rmtree(folder, ignore_errors=True)  # what a build that failed in another process left
                folder.mkdir()
                build(folder)
                built.touch()
        return folder

    return once


@pytest.fixture(scope="module")
def outage_stack(stack, tmp_path_factory) -> dict:
    """The shared source beside a destination broker of the module's own, for the tests that stop or kill -9
    the destination. They stopped the shared one before and so ran alone: every other test process waited
    while one ran, and while the tests already running drained (~5 minutes of a full run)."""
    with private_kafka(tmp_path_factory.mktemp("outage-destination")) as node:
        yield {"source": stack["source"], "destination": SimpleNamespace(name="destination", kafka=node)}


# The fault stack of this process while it is up (fault_stack), and whether it was stopped after the last test
# that needed it (pytest_runtest_teardown).
_fault_stacks: dict[str, FaultStack | bool] = {}


@pytest.fixture(scope="session")
def fault_stack(tmp_path_factory) -> FaultStack:
    """Three-node `source` and `destination` clusters behind Toxiproxy, for the tests that kill brokers and
    cut links (never the shared stack). Each test leaves the proxies without toxics and every broker up."""
    # The client compiler only: start, a rolling restart of one cluster and a minute idle took 80-86 CPU-s
    # against 133-143 with the default tiered compilation (two runs each, 2026-11-29; each restart compiles anew).
    own = FaultStack(tmp_path_factory.mktemp("fault-stack"), jit="c1")
    try:
        own.up()
        _fault_stacks.update(stack=own, stopped=False)
        yield own
    finally:
        if not _fault_stacks.get("stopped"):
            own.down()
        _fault_stacks.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A fault stack stopped after the fault tests comes back for a later one (a run without test processes
    keeps collection order, in which other tests come between them)."""
    if "fault_stack" in item.fixturenames and _fault_stacks.get("stopped"):
        _fault_stacks["stack"].up()
        _fault_stacks["stopped"] = False


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """The fault stack stops once the next test does not need it (after this test's own fixtures were torn
    down: the fault tests' `clusters` restarts brokers a test left down): its six brokers and proxy took ~13 %
    of the two cores while idle, and the fault tests, one scheduling group, end long before the run does."""
    if "stack" in _fault_stacks and not _fault_stacks["stopped"] and (
            nextitem is None or "fault_stack" not in nextitem.fixturenames):
        _fault_stacks["stack"].down()
        _fault_stacks["stopped"] = True


@pytest.fixture
def topic_name():
    """A fresh topic name per call: tests never share topics."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole session (start-up costs seconds on two cores)."""
    from spark_jobs.common.session import create_session

    session = create_session("kafka-mirror-tests", extra_conf={"spark.ui.enabled": "false"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone master and two workers (1 core, 1 GiB each) from pyspark's distribution, for the tests
    that submit to spark:// (devstack/spark_cluster.py); its logs and event logs stay under the session's tmp."""
    from devstack.spark_cluster import SparkCluster

    with SparkCluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster
