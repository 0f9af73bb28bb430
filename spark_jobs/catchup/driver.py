"""The catch-up's driver copies ranges while Spark starts, then hands what is left to Spark.

Spark's start-up (JVM, SparkContext, Python workers) takes 4-15 s on two cores, as long as the worker needs
for millions of records. So the driver does not wait for it: it starts the session on a thread
(`SparkStarter`) and meanwhile copies ranges itself, with the very code Spark's tasks run
(copy_range.copy_task: the worker's client settings, transform, commits and exactly-once transactions).

Invariants (per source partition: no gap, no overlap, order kept):
- The driver copies the largest ranges first, a few at once (threads: librdkafka's fetches and deliveries
  overlap; measured with 3M records under load 7-9 on 2 cores: 1 thread 375-395K msgs/s, 3: 379-569K,
  6: 399-477K), each range on one thread only, and stops every range at its first batch boundary after
  Spark is ready (session up, Python workers started), once it took `limit` offsets, or when a copy fails.
- A range the driver stopped at offset X ends as a whole range does: [start, X) flushed and X committed for
  the group (exactly-once: the transaction holding position X committed). Spark's part [X, end) is planned
  from X only after the driver's copy returned: a partition's parts are copied strictly in sequence, and the
  group's offset only moves forward, part end by part end.
- A failed driver copy leaves its range to Spark from the end last committed for it (nothing of the failed
  part was committed), where Spark's retries apply; a failure that repeats fails the job as it did before.
- When the driver copied every range before Spark was ready, the job does not wait for Spark.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from spark_jobs.catchup.copy_range import CopySettings, CopyTask, copy_task, stderr_event, stderr_line, warm_up
from spark_jobs.common.job_config import JobInputError

log = logging.getLogger("spark_jobs.catchup")

# Spark keeps one attempt's result of a task, not one attempt's writes: a speculative second attempt of a range
# would copy its records to the destination again (at-least-once: beyond the documented duplicate bound;
# exactly-once: two attempts fencing each other's transactions). So the catch-up turns speculation off whatever
# the cluster's defaults say, and refuses a session in which it is still on (one already running in the process).
NO_SPECULATION = {"spark.speculation": "false"}

Key = tuple[str, int]


class SparkStarter:
    """Starts the catch-up's SparkSession and its Python workers on a thread; `ready` is set when both are up
    (or the start failed: `wait` raises its error)."""

    def __init__(self, master: str | None, create=None, clock: Callable[[], float] = time.monotonic,
                 secrets: tuple[str, ...] = ()) -> None:
        self.master, self.clock = master, clock
        self.create = create or partial(_create_session, secrets=secrets)
        self.ready = threading.Event()
        self.session = None
        self.error: BaseException | None = None
        self.startup_s: float | None = None  # the session's start (JVM, SparkContext)
        self.ready_s: float | None = None    # and its Python workers' (a first job)
        self.abandoned = False
        self.started: float | None = None   # set by start()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="catchup-spark-start", daemon=True)

    def start(self) -> SparkStarter:
        self.started = self.clock()
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            session = self.create(self.master)
            refuse_speculation(session)
            with self.lock:
                self.startup_s = round(self.clock() - self.started, 2)
                self.session = session
                if self.abandoned:
                    session.stop()
                    return
            context = session.sparkContext
            slots = context.defaultParallelism
            context.setJobDescription("catch-up: start the Python workers")
            context.parallelize(range(slots), slots).mapPartitions(warm_up).collect()
            self.ready_s = round(self.clock() - self.started, 2)
        except BaseException as exc:  # the main thread raises it (wait)
            self.error = exc
        finally:
            self.ready.set()

    def wait(self):
        self.ready.wait()
        if self.error is not None:
            raise self.error
        return self.session

    def abandon(self) -> None:
        """Nothing left for Spark: a session already up is stopped, one still starting stops when it is up (its
        thread is a daemon: a job that exits first takes the JVM with it, which exits when its stdin closes)."""
        with self.lock:
            self.abandoned = True
            session = self.session
        if session is not None:
            session.stop()


def refuse_speculation(session) -> None:
    """JobInputError when the session runs speculative tasks (NO_SPECULATION says why)."""
    if session.sparkContext.getConf().get("spark.speculation", "false").strip().lower() == "true":
        session.stop()
        raise JobInputError("spark.speculation is true in the catch-up's Spark session: a speculative task would copy "
                            "its range a second time; set spark.speculation=false for the catch-up")


def _create_session(master: str | None, secrets: tuple[str, ...] = ()):
    from spark_jobs.common.session import create_session, launched_by_spark_submit

    # The executors' Python workers import spark_jobs and mirror_worker: installed beside pyspark, or shipped
    # with --py-files (the Airflow operators, mirror_airflow/operators/spark.py).
    # The tasks read with librdkafka: no Kafka connector jars, a JVM that only schedules them; no UI to start,
    # unless the submission says (the operators keep it for a cluster's runs).
    return create_session("mirror-catchup", master=master, kafka_source=False, light_jvm=True, secrets=secrets,
                          extra_conf={**NO_SPECULATION, **({} if launched_by_spark_submit() else {"spark.ui.enabled": "false"})})


@dataclass
class DriverCopy:
    """What the driver copied: per range (records, end committed, seconds, cpu seconds), and any failure."""

    parts: dict[Key, tuple[int, int, float, float]] = field(default_factory=dict)
    seconds: float = 0.0
    cpu_s: float = 0.0
    failure: str | None = None

    @property
    def records(self) -> int:
        return sum(part[0] for part in self.parts.values())


def copy_on_driver(tasks: list[CopyTask], settings: CopySettings, stop: Callable[[], bool], limit: int | None,
                   copy: Callable = copy_task, emit: Callable[[str], None] = stderr_line,
                   clock: Callable[[], float] = time.monotonic, threads: int = 1) -> DriverCopy:
    """Copy ranges, the largest first, on `threads` threads (a range on one thread only), until `stop()` (checked
    after every batch), a failure, or `limit` offsets taken (each range's part is counted when it is taken)."""
    done = DriverCopy()
    started, cpu = clock(), time.process_time()
    order = sorted(tasks, key=lambda t: (t.start - t.end, t.topic, t.partition))
    lock = threading.Lock()
    budget = [limit]

    def stopped() -> bool:
        return done.failure is not None or stop()

    def take() -> tuple[CopyTask, CopyTask] | None:
        with lock:
            if not order or budget[0] == 0 or stopped():
                return None
            task = order.pop(0)
            if budget[0] is None:
                return task, task
            part = replace(task, end=min(task.end, task.start + budget[0]))
            budget[0] -= part.end - part.start
            return task, part

    def run() -> None:
        while (taken := take()) is not None:
            task, part = taken
            try:
                copied, end, seconds, cpu_s = copy(part, settings, stopped, _planned_end(task.end))
            except Exception as exc:  # Spark copies the range from its start: nothing of this part was committed
                with lock:
                    done.failure = done.failure or f"{task.topic}[{task.partition}]: {exc.__class__.__name__}: {exc}"
                emit(f"catchup: the driver's copy of {task.topic}[{task.partition}]: {exc.__class__.__name__}: "
                     f"{exc}; Spark copies the range from offset {task.start}")
                return
            with lock:
                done.parts[(task.topic, task.partition)] = (copied, end, seconds, cpu_s)
            where = "" if end == task.end else f" on the driver; Spark copies the rest, up to offset {task.end}"
            emit(f"catchup: {task.topic}[{task.partition}] copied {copied} records up to offset {end}{where}")

    workers = [threading.Thread(target=run, name=f"catchup-driver-copy-{n}", daemon=True) for n in range(threads - 1)]
    for worker in workers:
        worker.start()
    run()
    for worker in workers:
        worker.join()
    done.seconds, done.cpu_s = round(clock() - started, 3), round(time.process_time() - cpu, 3)
    return done


def _planned_end(end: int) -> Callable[[dict], None]:
    """A driver part's progress lines, told against the plan's range (a part may end before it)."""

    def emit(event: dict) -> None:
        if event["position"] < end:
            event = {**event, "end": end, "offsets_left": end - event["position"]}
            if event["event"] == "partition done":
                event["event"] = "partition handed over"
        stderr_event(event)

    return emit


def left_for_spark(tasks: list[CopyTask], done: DriverCopy) -> list[CopyTask]:
    """Spark's part of each range: from the end the driver committed for it (its start when the driver did not
    copy it), carrying the records the driver copied of it; ranges the driver finished are not there."""
    left = []
    for task in tasks:
        copied, end, _, _ = done.parts.get((task.topic, task.partition), (0, task.start, 0.0, 0.0))
        if end < task.end:
            left.append(replace(task, start=end, copied_before=copied))
    return left
