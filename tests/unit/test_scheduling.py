"""The test run's scheduling (tests/conftest.py): the late Spark group waits for the groups it must not run
beside, then goes next; with nothing else left it goes anyway."""

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import LATE_SPARK_GROUP, LateLast, _group, pytest_collection_modifyitems


def _queue(ready) -> LateLast:
    queue = LateLast(ready=ready)
    for scope in ["spark", LATE_SPARK_GROUP, "faults", "tests/unit/test_a.py::test_one", "tests/unit/test_b.py::t"]:
        queue[scope] = {f"{scope}-test": False}
    return queue


def test_the_late_group_comes_after_every_other_scope_while_not_ready():
    queue = _queue(ready=lambda: False)
    handed_out = [queue.popitem(last=False)[0] for _ in range(5)]
    assert handed_out == ["spark", "faults", "tests/unit/test_a.py::test_one", "tests/unit/test_b.py::t",
                          LATE_SPARK_GROUP]
    assert not queue


def test_the_late_group_goes_next_once_ready():
    done = {"faults": False}
    queue = _queue(ready=lambda: done["faults"])
    assert [queue.popitem(last=False)[0] for _ in range(2)] == ["spark", "faults"]
    done["faults"] = True
    assert queue.popitem(last=False)[0] == LATE_SPARK_GROUP
    assert queue.popitem(last=False)[0] == "tests/unit/test_a.py::test_one"


def test_a_queue_of_the_late_group_alone_hands_it_out():
    queue = LateLast({LATE_SPARK_GROUP: {"t": False}})
    assert queue.popitem(last=False) == (LATE_SPARK_GROUP, {"t": False})


def _item(path: str, *fixtures: str, markers: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(path=Path(path), fixturenames=list(fixtures),
                           get_closest_marker=lambda name: name if name in markers else None)


def test_every_test_on_the_standalone_cluster_is_in_the_late_group_wherever_it_is():
    """One cluster a run: test_package's installed jobs started a second one of their own beside it."""
    for item in (_item("tests/integration/test_package.py", "packaged", "stack", "spark_cluster"),
                 _item("tests/integration/test_spark_cluster.py", "stack", "spark_cluster", markers=("spark",)),
                 _item("tests/integration/test_spark_security.py", "spark_cluster", "airflow_db", markers=("spark",))):
        assert _group(item) == LATE_SPARK_GROUP, item.path
    assert _group(_item("tests/integration/test_package.py", "packaged", "stack")) == "package"
    assert _group(_item("tests/integration/test_consistency_check.py", "spark", markers=("spark",))) == "spark"
    assert _group(_item("tests/integration/test_consistency_check_empty.py", "spark")) == LATE_SPARK_GROUP


def test_the_late_groups_test_of_the_installed_wheel_goes_last_and_the_rest_keeps_its_order():
    """Its venv is the package group's to build first: the late group reaches it as late as it can."""
    wheel_jobs = _item("tests/integration/test_package.py", "packaged", "spark_cluster")
    items = [_item("tests/integration/test_consistency_check_empty.py", "spark"),
             _item("tests/integration/test_package.py", "packaged"), wheel_jobs,
             _item("tests/integration/test_spark_cluster.py", "spark_cluster"), _item("tests/unit/test_a.py")]
    ordered = items[:2] + items[3:] + [wheel_jobs]
    pytest_collection_modifyitems(SimpleNamespace(), items)
    assert [item.path.name for item in items] == [item.path.name for item in ordered]
    assert items[-1] is wheel_jobs
