"""The catch-up's driver copy while Spark starts (spark_jobs/catchup/driver.py) and a range stopped early
(copy_range.copy_until), with in-memory fakes: parts in sequence, nothing skipped or copied twice."""

from __future__ import annotations

import threading

import pytest

from spark_jobs.catchup import driver as driver_module
from spark_jobs.catchup.copy_range import CopySettings, CopyTask, copy_until
from spark_jobs.catchup.driver import DriverCopy, SparkStarter, copy_on_driver, left_for_spark
from spark_jobs.common.job_config import JobInputError
from tests.unit.spark_jobs.catchup.test_copy_range import TASK, RangeConsumer, RecordingProducer, _log

SETTINGS = CopySettings(consumer={}, producer={})


def test_a_stopped_range_flushes_and_commits_where_it_stopped_and_says_it_was_handed_over():
    calls, events = [], []
    consumer = RangeConsumer(_log(range(10, 25)), batch_limit=3, calls=calls)
    producer = RecordingProducer(calls)
    batches = []
    copied, end = copy_until(TASK, SETTINGS, consumer, producer, [], emit=events.append,
                             stop=lambda: batches.append(1) or len(batches) == 2)
    # Stopped after the second batch of 3: [10, 16) produced, flushed, 16 committed; nothing at or past 16.
    assert (copied, end) == (6, 16)
    assert [record[2] for record in producer.produced] == [f"k{o}".encode() for o in range(10, 16)]
    assert calls == [("flush", 6), ("commit", [("orders", 2, 16, "id-orders")])]
    assert events[-1]["event"] == "partition handed over" and events[-1]["offsets_left"] == 4


def test_a_stopped_exactly_once_range_commits_its_transaction_at_the_stop():
    calls = []
    consumer = RangeConsumer(_log(range(10, 25)), batch_limit=3, calls=calls)
    copied, end = copy_until(TASK, SETTINGS, consumer, RecordingProducer(calls), [], emit=lambda _e: None,
                             checkpoint=lambda position: calls.append(("checkpoint", position)), checkpoint_every=100,
                             stop=lambda: True)
    assert (copied, end) == (3, 13)
    assert calls == [("checkpoint", 13), ("commit", [("orders", 2, 13, "id-orders")])]


def test_a_range_not_stopped_ends_at_its_end():
    consumer = RangeConsumer(_log(range(10, 25)))
    assert copy_until(TASK, SETTINGS, consumer, RecordingProducer(), [], emit=lambda _e: None,
                      stop=lambda: False) == (10, 20)


class FakeCopy:
    """copy_task: copies a part up to its end, or up to `stop_at` when stop() says so on the way."""

    def __init__(self, stop_at: dict | None = None, fail: set | None = None):
        self.parts, self.stop_at, self.fail = [], stop_at or {}, fail or set()

    def __call__(self, task: CopyTask, settings, stop, emit=None):
        self.parts.append((task.partition, task.start, task.end))
        if task.partition in self.fail:
            raise RuntimeError("delivery failed")
        end = self.stop_at.get(task.partition, task.end) if stop() else task.end
        return end - task.start, end, 0.5, 0.25


def _tasks(*ranges):
    return [CopyTask("orders", p, start, end, "cu.orders", p, "id") for p, start, end in ranges]


def test_the_driver_copies_the_largest_range_first_and_hands_the_rest_over_at_its_stop():
    tasks = _tasks((0, 0, 100), (1, 50, 400), (2, 0, 200))
    ready = threading.Event()
    copy = FakeCopy(stop_at={2: 120})

    def stop():
        return ready.is_set()

    def copying(task, settings, stop_, emit=None):
        if task.partition == 2:
            ready.set()  # Spark is ready while the driver copies its second range
        return copy(task, settings, stop_, emit)

    done = copy_on_driver(tasks, SETTINGS, stop, None, copy=copying, emit=lambda _line: None)
    assert copy.parts == [(1, 50, 400), (2, 0, 200)]  # the largest first; none started once Spark is ready
    assert done.parts[("orders", 1)][:2] == (350, 400) and done.records == 350 + 120
    left = left_for_spark(tasks, done)
    # Partition 2 continues exactly where the driver committed, counting what the driver copied of it.
    assert [(t.partition, t.start, t.end, t.copied_before) for t in left] == [(0, 0, 100, 0), (2, 120, 200, 120)]


def test_a_limit_splits_ranges_exactly_and_zero_leaves_everything_to_spark():
    tasks = _tasks((0, 0, 100), (1, 0, 100), (2, 0, 40))
    copy = FakeCopy()
    done = copy_on_driver(tasks, SETTINGS, lambda: False, 150, copy=copy, emit=lambda _line: None)
    assert copy.parts == [(0, 0, 100), (1, 0, 50)]
    assert [(t.partition, t.start, t.copied_before) for t in left_for_spark(tasks, done)] == [(1, 50, 50), (2, 0, 0)]
    nothing = copy_on_driver(tasks, SETTINGS, lambda: False, 0, copy=FakeCopy(), emit=lambda _line: None)
    assert nothing.parts == {} and left_for_spark(tasks, nothing) == tasks


def test_a_failed_driver_copy_leaves_its_range_to_spark_from_its_start_and_stops_the_driver():
    tasks = _tasks((0, 10, 100), (1, 0, 50))
    lines = []
    done = copy_on_driver(tasks, SETTINGS, lambda: False, None, copy=FakeCopy(fail={0}), emit=lines.append)
    assert done.parts == {} and "orders[0]: RuntimeError: delivery failed" in done.failure
    assert lines == ["catchup: the driver's copy of orders[0]: RuntimeError: delivery failed; "
                     "Spark copies the range from offset 10"]
    assert [(t.partition, t.start) for t in left_for_spark(tasks, done)] == [(0, 10), (1, 0)]


def test_every_range_done_on_the_driver_leaves_nothing_for_spark():
    tasks = _tasks((0, 0, 10), (1, 5, 5 + 7))
    done = copy_on_driver(tasks, SETTINGS, lambda: False, None, copy=FakeCopy(), emit=lambda _line: None)
    assert left_for_spark(tasks, done) == [] and done.records == 17


class FakeSession:
    def __init__(self, conf=None):
        self.stopped = False
        self.sparkContext = self
        self.conf = dict(conf or {})

    def getConf(self):
        return self.conf

    defaultParallelism = 2

    def stop(self):
        self.stopped = True

    def setJobDescription(self, _text):
        pass

    def parallelize(self, items, slices):
        self.warmed = (list(items), slices)
        return self

    def mapPartitions(self, function):
        return self

    def collect(self):
        return []


def test_the_starter_is_ready_once_the_session_and_its_python_workers_are_up():
    session = FakeSession()
    starter = SparkStarter("local[2]", create=lambda master: session).start()
    assert starter.wait() is session and starter.ready.is_set()
    assert session.warmed == ([0, 1], 2) and starter.startup_s is not None and starter.ready_s is not None


def test_a_failed_start_raises_where_the_job_waits_for_spark():
    def broken(master):
        raise RuntimeError("no Java")

    starter = SparkStarter(None, create=broken).start()
    starter.ready.wait(5)
    with pytest.raises(RuntimeError, match="no Java"):
        starter.wait()


def test_a_session_that_comes_up_after_the_driver_finished_is_stopped():
    release, session = threading.Event(), FakeSession()

    def slow(master):
        release.wait(5)
        return session

    starter = SparkStarter(None, create=slow).start()
    starter.abandon()  # the driver copied everything before Spark was up
    release.set()
    starter.thread.join(5)
    assert session.stopped and starter.ready.is_set()


def test_a_session_with_speculation_on_is_refused_and_stopped():
    session = FakeSession({"spark.speculation": "true"})
    starter = SparkStarter(None, create=lambda master: session).start()
    with pytest.raises(JobInputError, match=r"^spark.speculation is true in the catch-up's Spark session: .*"
                                            r"set spark.speculation=false for the catch-up$"):
        starter.wait()
    assert session.stopped


def test_the_catchup_asks_spark_for_no_speculation(monkeypatch):
    import spark_jobs.common.session as session_module

    asked = {}
    monkeypatch.setattr(session_module, "create_session", lambda name, **kwargs: asked.update(kwargs) or FakeSession())
    driver_module._create_session("local[1]")
    assert asked["extra_conf"]["spark.speculation"] == "false"


def test_driver_copy_records_add_up():
    assert DriverCopy({("t", 0): (3, 13, 0.1, 0.1), ("t", 1): (4, 4, 0.1, 0.1)}).records == 7


def test_threads_copy_each_range_once_and_a_failure_stops_the_others_at_their_next_batch():
    tasks = _tasks(*[(p, 0, 100 + p) for p in range(8)])
    copy = FakeCopy()
    done = copy_on_driver(tasks, SETTINGS, lambda: False, None, copy=copy, emit=lambda _line: None, threads=3)
    assert sorted(copy.parts) == [(p, 0, 100 + p) for p in range(8)] and done.records == sum(100 + p for p in range(8))
    assert left_for_spark(tasks, done) == []

    seen_failure = []

    def copying(task, settings, stop, emit=None):
        if task.partition == 7:
            raise RuntimeError("boom")
        seen_failure.append(stop())
        return 0, task.start, 0.0, 0.0  # stopped at once: nothing copied, its start committed

    done = copy_on_driver(tasks, SETTINGS, lambda: False, None, copy=copying, emit=lambda _line: None, threads=1)
    assert done.failure.startswith("orders[7]") and seen_failure == []  # the largest range first: nothing after it
    assert left_for_spark(tasks, done) == tasks


def test_lines_of_the_driver_threads_never_run_into_one(capsys):
    from spark_jobs.catchup.copy_range import stderr_line

    threads = [threading.Thread(target=lambda n=n: [stderr_line(f"catchup: line {n}") for _ in range(200)])
               for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 800 and all(line.startswith("catchup: line ") and len(line) == 15 for line in lines)
