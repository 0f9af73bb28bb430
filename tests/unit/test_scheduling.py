"""The test run's scheduling (tests/conftest.py): the late Spark group is handed out after every other scope."""

from tests.conftest import LATE_SPARK_GROUP, LateLast


def test_the_late_group_comes_after_every_other_scope():
    queue = LateLast()
    for scope in ["spark", LATE_SPARK_GROUP, "faults", "tests/unit/test_a.py::test_one"]:
        queue[scope] = {f"{scope}-test": False}
    handed_out = [queue.popitem(last=False)[0] for _ in range(4)]
    assert handed_out == ["spark", "faults", "tests/unit/test_a.py::test_one", LATE_SPARK_GROUP]
    assert not queue


def test_a_queue_of_the_late_group_alone_hands_it_out():
    queue = LateLast({LATE_SPARK_GROUP: {"t": False}})
    assert queue.popitem(last=False) == (LATE_SPARK_GROUP, {"t": False})
