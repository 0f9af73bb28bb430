"""What the benchmarks share: the local stack to measure on, and a paced producer of live records."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from devstack import CLUSTERS, Stack, paths
from devstack.kafka import KafkaNode


@contextmanager
def bench_stack(kafka_only: bool = False, kafka_heap_mb: int = 384, reuse_running: bool = True,
                kafka_gc: str = "serial", storage: str = "disk", keep_logs: Path | None = None):
    """The running stack (`make stack-up`), or one started for this run and stopped after it.

    reuse_running=False: always start one (private brokers: no one else's traffic, and gigabytes of
    benchmark records never land on a stack others use).
    kafka_only: when no stack is running, start only the two Kafka nodes (no schema registries) —
    for benchmarks that copy bytes and want the machine's cores for the systems they measure.
    storage="memory" (kafka_only): the brokers' logs in tmpfs (MEMORY_ROOT), see `memory_root`.
    keep_logs: a directory that receives each broker's server.log when the stack stops (kafka_only).
    """
    with _sigterm_exits():
        yield from _bench_stack(kafka_only, kafka_heap_mb, reuse_running, kafka_gc, storage, keep_logs)


@contextmanager
def _sigterm_exits():
    """While a benchmark runs, SIGTERM (`timeout`, a killed make) exits through its `finally` blocks: they stop
    the system it launched (in a session of its own, which the signal does not reach) and its brokers. Without
    it, a killed benchmark left its mirror running against brokers that were gone, taking a share of the two
    cores from the next benchmark's measurements."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# Where storage="memory" puts the brokers' logs.
MEMORY_ROOT = Path("/dev/shm")


def memory_root(needed_bytes: int, root: Path = MEMORY_ROOT) -> Path:
    """The tmpfs directory for brokers whose logs stay in memory, or SystemExit naming what is missing.

    Why: on this machine's disk (ext4 on a virtual disk) a broker's appends stall in page faults on its
    memory-mapped index files (jstack: OffsetIndex.append / TimeIndex.maybeAppend) once a run has made a
    thousand partitions: writing a transaction's markers into 264-588 partitions took 10-16 s (a marker each,
    ~40 ms apiece), and at 1,000 partitions the worker ran 1.3-1.8x slower at-least-once and 1.3-3.7x slower
    exactly-once than with the same brokers in tmpfs (docs/benchmarks/width.md). That is the disk, not the systems the
    benchmark compares; in memory the brokers stop being the limit first."""
    if not root.is_dir():
        raise SystemExit(f"--broker-storage memory: {root} does not exist (a tmpfs is needed); "
                         "use --broker-storage disk")
    usage = shutil.disk_usage(root)
    if usage.free < needed_bytes:
        raise SystemExit(f"--broker-storage memory: {root} has {usage.free / 2**30:.1f} GiB free, the run needs "
                         f"about {needed_bytes / 2**30:.1f} GiB; use --broker-storage disk or fewer --records")
    return root


def _bench_stack(kafka_only: bool, kafka_heap_mb: int, reuse_running: bool, kafka_gc: str, storage: str,
                 keep_logs: Path | None):
    stack = Stack(paths.default_stack_dir())
    if reuse_running and stack.is_up():
        yield stack
        return
    if storage not in ("disk", "memory") or (storage == "memory" and not kafka_only):
        raise ValueError(f"storage {storage!r}: 'disk', or 'memory' for kafka_only stacks")
    root = Path(tempfile.mkdtemp(prefix="bench-stack-", dir=MEMORY_ROOT if storage == "memory" else None))
    if not kafka_only:
        own = Stack(root, kafka_heap_mb=kafka_heap_mb)
        own.up()
        try:
            yield own
        finally:
            own.down()
        return
    nodes = {name: KafkaNode(name, root / name / "kafka", heap_mb=kafka_heap_mb, gc=kafka_gc) for name in CLUSTERS}
    try:
        for node in nodes.values():
            node.configure()
            node.start()
        with ThreadPoolExecutor(len(nodes)) as pool:
            for future in [pool.submit(n.wait_ready) for n in nodes.values()]:
                future.result()
        yield {name: SimpleNamespace(name=name, kafka=node) for name, node in nodes.items()}
    finally:
        for name, node in nodes.items():
            node.stop()
            if keep_logs is not None and node.process.log_file.exists():
                shutil.copy(node.process.log_file, Path(keep_logs) / f"broker-{name}.log")
        shutil.rmtree(root, ignore_errors=True)


def produce_paced(producer, topic: str, rate: float, start: float, done: Callable[[float], bool],
                  record: Callable[[int], tuple[bytes, bytes]]) -> int:
    """Produce `rate` records/s into `topic` from `start` (epoch seconds) until `done(now)`; `record(i)`
    gives the i-th (value, key), built when it is sent (a value carrying its produce time stays true after
    a full queue made it wait). Returns how many were sent; the caller flushes."""
    sent = 0
    while True:
        now = time.time()
        if done(now):
            return sent
        due = int((now - start) * rate)
        while sent < due:
            try:
                producer.produce(topic, *record(sent))
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        time.sleep(0.002)


@contextmanager
def standalone(masters: str, workdir: str):
    """The masters, `standalone` replaced by the URL of a devstack Spark cluster started for the run."""
    names = masters.split(",")
    if "standalone" not in names:
        yield names
        return
    from devstack.spark_cluster import SparkCluster

    cluster = SparkCluster(Path(workdir) / "spark-cluster")
    cluster.up()
    # Its client configuration holds the shared secret the cluster authenticates applications with.
    previous = os.environ.get("SPARK_CONF_DIR")
    os.environ["SPARK_CONF_DIR"] = str(cluster.conf_dir)
    try:
        yield [cluster.master_url if name == "standalone" else name for name in names]
    finally:
        if previous is None:
            os.environ.pop("SPARK_CONF_DIR", None)
        else:
            os.environ["SPARK_CONF_DIR"] = previous
        cluster.down()


def check_transactional(bootstrap: str, topic: str, source_bootstrap: str, source_topic: str,
                        partition: int = 0) -> dict:
    """Proof that a run copied `source_topic` into `topic` in transactions, not silently at-least-once:
    partition `partition` of `topic` read `read_committed` holds exactly the source partition's records,
    and its high watermark is past them (the gap: transaction markers; at-least-once has none, and its
    duplicates would make the count exceed the source's). Raises RuntimeError when not."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    def consumer(servers: str, isolation: str) -> Consumer:
        return Consumer({"bootstrap.servers": servers, "group.id": "bench-eos-check", "enable.auto.commit": False,
                         "isolation.level": isolation})

    source = consumer(source_bootstrap, "read_uncommitted")
    try:
        expected = source.get_watermark_offsets(TopicPartition(source_topic, partition), timeout=10)[1]
    finally:
        source.close()
    raw = consumer(bootstrap, "read_uncommitted")
    try:
        high = raw.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        raw.close()
    committed = consumer(bootstrap, "read_committed")
    count = 0
    try:
        committed.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while count < expected and time.monotonic() < deadline:
            count += sum(1 for m in committed.consume(10_000, 0.5) if not m.error())
        # One more short read: a count above `expected` means duplicates.
        count += sum(1 for m in committed.consume(10_000, 0.5) if not m.error())
    finally:
        committed.close()
    proof = {"partition": partition, "source_records": expected, "read_committed_records": count,
             "high_watermark": high, "markers": high - count}
    if count != expected or high <= count:
        raise RuntimeError(f"{topic} was not copied exactly once in transactions: {proof}")
    return proof
