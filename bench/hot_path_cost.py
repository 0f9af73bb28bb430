"""The worker's own CPU per record on its hot path, without brokers: what stands between it and a bare loop.

    .venv/bin/python -m bench.hot_path_cost [--records 200000] [--sizes 100,1024] [--repeats 7] [--tree DIR]

The worker's `BatchMirror.mirror` (engine/hot_path.py, assembled as the worker assembles it, at-least-once,
partitions preserved) is handed batches of 10,000 real `confluent_kafka.Message`s (6 partitions, runs of 500
records each, no headers) and hands them to a real `Producer` that has no broker: librdkafka only queues the
records, which are purged between batches, untimed. The same batches go through the bare loop's produce calls,
by keyword and by position. Timed with the process's CPU clock around each pass; the figure is the least and the
median over `--repeats` of CPU nanoseconds per record. Single-threaded and broker-free, so two cores and noisy
neighbours move it far less than an end-to-end run (bench.compare), which also counts librdkafka's threads.

The worker's admin client and destination topics, which the hot path does not use, are the unit tests' in-memory
fakes (tests/unit/fakes.py). `--tree DIR` times the worker of another checkout (e.g. a git worktree of main) beside
this one's, in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

BATCH = 10_000
RUN = 500
PARTITIONS = 6


def batches(count: int, size: int) -> list[list]:
    from confluent_kafka import Message

    out, offsets = [], [0] * PARTITIONS
    value = (b"v" * size)[: size - 8]
    for start in range(0, count, BATCH):
        batch = []
        for first in range(start, min(count, start + BATCH), RUN):
            partition = (first // RUN) % PARTITIONS
            for _ in range(min(RUN, count - first)):
                offset = offsets[partition]
                offsets[partition] += 1
                batch.append(Message(topic="t", partition=partition, offset=offset, key=b"k%07d" % (offset % 10_000),
                                     value=value, headers=None, timestamp=(1, 1_700_000_000_000 + offset)))
        out.append(batch)
    return out


def _producer():
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "delivery.report.only.error": True,
                     "queue.buffering.max.messages": 2 * BATCH, "queue.buffering.max.kbytes": 2_000_000})


def _timed(one_pass: Callable[[list], None], batch_list: list, producer) -> float:
    """CPU seconds of `one_pass(batch)` over every batch, the producer's queue purged between batches (untimed)."""
    spent = 0.0
    for batch in batch_list:
        started = time.process_time()
        one_pass(batch)
        spent += time.process_time() - started
        producer.purge()
        producer.poll(0)
    return spent


def worker_pass(producer):
    """The worker's hot path as the worker assembles it, at-least-once, partitions preserved."""
    from mirror_worker.config.model import build_mirror_config
    from mirror_worker.engine.source_stream import SourceStream
    from mirror_worker.engine.worker import MirrorWorker
    from tests.unit.fakes import FakeAdmin, FakeDestination

    config = build_mirror_config({
        "name": "m", "sources": [{"name": "src", "consumer": {"bootstrap.servers": "a:1"}}],
        "producer": {"bootstrap.servers": "b:1"}, "whitelist": "t", "group_id": "g", "preserve_partitions": True,
        "queue_size": 4 * BATCH})
    worker = MirrorWorker(config)
    worker.assemble(FakeAdmin(), FakeDestination())
    worker.router.set_destination_partitions("t", PARTITIONS)
    worker.producers.append(producer)
    stream = SourceStream("src", consumer=None, cluster_id="c1", same_cluster_as_destination=False,
                          producers=worker.producers)
    worker.streams.append(stream)
    # The purge between batches reports every record undelivered: not what is timed, so not logged either.
    worker.hot_path.on_refused_delivery = lambda run, err, msg: None
    mirror = worker.hot_path.mirror

    def one_pass(batch):
        mirror(stream, batch)
        if stream.stash:  # the queue.size room ran out: part of the batch was not handed over, so not timed
            raise RuntimeError(f"{len(stream.stash)} records held back: raise queue_size")
    return one_pass


def bare_passes(producer) -> dict:
    produce = producer.produce

    def by_keyword(batch):
        for msg in batch:
            produce("m." + msg.topic(), msg.value(), msg.key(), msg.partition(), timestamp=msg.timestamp()[1],
                    headers=msg.headers())

    def by_position(batch):
        for msg in batch:
            produce("m." + msg.topic(), msg.value(), msg.key(), msg.partition(), None, None, msg.timestamp()[1],
                    msg.headers())

    return {"bare by keyword": by_keyword, "bare by position": by_position}


def measure(records: int, size: int, repeats: int, bare: bool) -> dict:
    """One process, one tree: {name: [ns per record of each repeat]}."""
    producer = _producer()
    batch_list = batches(records, size)
    passes = {"worker": worker_pass(producer)}
    if bare:
        passes.update(bare_passes(producer))
    _timed(passes["worker"], batch_list[:2], producer)  # warm: the interpreter specialises the loop
    out: dict = {name: [] for name in passes}
    for _ in range(repeats):
        for name, one_pass in passes.items():
            out[name].append(round(_timed(one_pass, batch_list, producer) / records * 1e9))
    return out


def run_tree(tree: str, records: int, size: int, repeats: int, bare: bool) -> dict:
    """`measure` in a fresh interpreter whose mirror_worker (and tests.unit.fakes) are `tree`'s: this file runs as
    a script there, so nothing of this checkout is imported but the file itself."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(records), str(size), str(repeats),
                           str(int(bare))], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--sizes", default="100,1024")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tree", default=None, help="also time the worker of this checkout (worker-base)")
    parser.add_argument("--child", nargs=4, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        records, size, repeats, bare = args.child
        print(json.dumps(measure(records, size, repeats, bool(bare))))
        return 0
    here = os.getcwd()
    for size in [int(s) for s in args.sizes.split(",")]:
        found = run_tree(here, args.records, size, args.repeats, True)
        if args.tree:
            base = run_tree(os.path.abspath(args.tree), args.records, size, args.repeats, False)
            found["worker-base"] = base["worker"]
        for name, values in found.items():
            print(json.dumps({"size": size, "system": name, "records": args.records, "ns_per_record_min": min(values),
                              "ns_per_record_median": statistics.median(values), "repeats": values}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
