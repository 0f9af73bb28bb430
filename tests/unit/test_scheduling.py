"""The test run's scheduling (tests/conftest.py): the late Spark group waits for the groups it must not run
beside, then goes next; with nothing else left it goes anyway."""

from tests.conftest import LATE_SPARK_GROUP, LateLast


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
