"""Several workers at width (issue "Production width"): balance, and what a killed or added worker moves.

    .venv/bin/python -m bench.width_group [--width 5000] [--workers 3] [--delivery exactly-once]
        [--sample 200] [--sample-rate 10] [--background-rate 1000] [--broker-storage memory|disk]

On two Kafka nodes started for the run (their logs in tmpfs unless `--broker-storage disk`), `--width` partitions
(topics of 10) are mirrored by `--workers` workers of one mirror (static membership, `--worker.slot i`,
cooperative-sticky assignment). A live stream runs throughout: `--sample` partitions spread over the topics get
`--sample-rate` records/s each (their arrival on the destination is watched), every other partition
`--background-rate` records/s in all. Once every partition is owned, the shares have not changed for 10 s
(settled_s) and every sampled partition's records arrive within 2 s of reaching the source (caught_up_s: before, a
kill measured the workers' start-up backlog):

  balance      partitions per worker, and the largest deviation from the mean (%);
  kill         worker 0 is killed (-9); once the others own everything: the partitions that changed owner (only
               the killed worker's must), and over the sampled partitions the others kept, the longest gap
               between two records' arrival on the destination from 5 s before the kill to 20 s after;
  add          worker 0 is started again: the partitions that left the others, and the same gap for the sampled
               partitions that stayed where they were.

Exactly-once arrivals are read read_committed (what its readers see). Writes bench/results/width-group.json.

`--logs DIR` keeps, beside the workers' logs: arrivals.json (each sampled partition's [arrival, record timestamp]
pairs: the timestamp is the record's append time on the source, which the mirror keeps), probes.json (each second: the
live producer's records not yet acknowledged by the source and its librdkafka statistics, and the arrivals
reader's own backlog) and both Kafka nodes' logs. A gap in arrivals is the mirror's only if the source had the
records and the reader was not behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import bench_stack, memory_root
from bench.harness import RESULTS, delete_topics, known_partitions, warm_destination_transactions
from devstack import paths

TOPIC_PARTITIONS = 10
# Each record's timestamp is its append time on the source (the mirror keeps it): mirror_gap.
SOURCE_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


class Worker:
    def __init__(self, slot: int, args, source: str, destination: str, topics_regex: str, workdir: Path) -> None:
        self.slot = slot
        source_cfg = workdir / "source.properties"
        source_cfg.write_text(f"bootstrap.servers={source}\ngroup.id=bench-group-{args.run}\n"
                              "auto.offset.reset=latest\npartition.assignment.strategy=cooperative-sticky\n"
                              "session.timeout.ms=10000\nheartbeat.interval.ms=1000\n")
        destination_cfg = workdir / "destination.properties"
        destination_cfg.write_text(f"bootstrap.servers={destination}\n")
        self.log = workdir / f"worker-{slot}.{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "mirror_worker", "--name", f"g{args.run}", "--consumer.config", str(source_cfg),
                "--producer.config", str(destination_cfg), "--whitelist", topics_regex, "--prefix", "m.",
                "--preserve.partitions", "--static.membership", "--worker.slot", str(slot)]
        if args.delivery == "exactly-once":
            argv.append("--exactly.once")
        self.proc = subprocess.Popen(argv, cwd=paths.ROOT, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def owned(self) -> set[str]:
        owned: set[str] = set()
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("pid") != self.proc.pid:
                continue
            if entry.get("msg") == "partitions assigned":
                owned |= set(entry["partitions"])
            elif entry.get("msg") in ("partitions revoked", "partitions lost (not committed)"):
                owned -= set(entry["partitions"])
        return owned

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


class Live(threading.Thread):
    def __init__(self, bootstrap: str, topics: list[str], sampled: list[tuple[str, int]], args) -> None:
        super().__init__(daemon=True)
        # librdkafka's statistics each second (kept with --logs): whether unacknowledged records wait in the
        # producer's own queue (int_latency) or on the broker (waitresp, rtt).
        self.stats: list[dict] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "statistics.interval.ms": 1000,
                                  "stats_cb": self._on_stats})
        self.partitions = [(t, p) for t in topics for p in range(TOPIC_PARTITIONS)]
        self.sampled, self.args = sampled, args
        self.halt = threading.Event()
        self.error: BaseException | None = None
        # (wall time, seconds late) of each tick that started more than 0.5 s late: a stall of the live stream
        # itself shows here, not only as a gap in the destination's arrivals.
        self.late: list[tuple[float, float]] = []
        # (wall time, records produced but not yet acknowledged by the source) each second: a backlog here means the
        # records' timestamps (taken at produce()) run ahead of the source itself.
        self.queued: list[tuple[float, int]] = []
        # Each sampled partition's source append times, from the delivery reports (LogAppendTime): mirror_gap.
        self.appended: dict[str, list[float]] = {f"{t}[{p}]": [] for t, p in sampled}
        # Just after the topics were created, produce() to one the producer has no metadata for raises "Unknown
        # topic" (it killed this thread, and so the run's live stream, once at 5,000): it starts once it knows all.
        wanted = set(self.partitions)
        wait_for(lambda: wanted <= known_partitions(self.producer), "the source topics' metadata", 300)

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # a live stream that died must not read as a mirror's gap: check() raises it
            self.error = exc

    def _produce(self) -> None:
        tick, i, start = 0.05, 0, time.monotonic()
        # Records owed per tick, carried over: the rates as given (rounding each tick's share had made 10 records/s
        # per sampled partition 20).
        owed_sample = owed_background = 0.0
        while not self.halt.is_set():
            if time.monotonic() - start > 0.5:
                self.late.append((round(time.time(), 2), round(time.monotonic() - start, 2)))
            owed_sample += self.args.sample_rate * tick
            owed_background += self.args.background_rate * tick
            per_tick_sample, per_tick_background = int(owed_sample), int(owed_background)
            owed_sample -= per_tick_sample
            owed_background -= per_tick_background
            for topic, partition in self.sampled:
                for _ in range(per_tick_sample):
                    self._send(topic, partition, self._on_delivery)
            for _ in range(per_tick_background):
                topic, partition = self.partitions[i % len(self.partitions)]
                i += 1
                self._send(topic, partition)
            self.producer.poll(0)
            if not self.queued or time.time() - self.queued[-1][0] >= 1:
                self.queued.append((round(time.time(), 2), len(self.producer)))
            start += tick
            time.sleep(max(0.0, start - time.monotonic()))
        self.producer.flush(30)

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the live stream failed: {self.error!r}") from self.error

    def _on_stats(self, raw: str) -> None:
        stats = json.loads(raw)
        brokers = [b for b in stats["brokers"].values() if b["nodeid"] >= 0]
        self.stats.append({"t": round(time.time(), 2), "msg_cnt": stats["msg_cnt"], "brokers": [
            {"state": b["state"], "outbuf": b["outbuf_msg_cnt"], "waitresp": b["waitresp_msg_cnt"],
             "rtt_ms": round(b["rtt"]["avg"] / 1000, 1), "int_latency_ms": round(b["int_latency"]["avg"] / 1000, 1),
             "outbuf_latency_ms": round(b["outbuf_latency"]["avg"] / 1000, 1), "req_timeouts": b["req_timeouts"],
             "txerrs": b["txerrs"], "disconnects": b["disconnects"]} for b in brokers]})

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.appended[f"{msg.topic()}[{msg.partition()}]"].append(msg.timestamp()[1] / 1000)

    def _send(self, topic: str, partition: int, on_delivery=None) -> None:
        while True:
            try:
                self.producer.produce(topic, b"x" * 100, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:
                self.producer.poll(0.05)


class Arrivals(threading.Thread):
    """Wall-clock arrival times of the sampled destination partitions' records."""

    def __init__(self, bootstrap: str, sampled: list[tuple[str, int]], read_committed: bool) -> None:
        super().__init__(daemon=True)
        # At 5,000 partitions a reader that assigned its 200 partitions at once read nothing for the whole run (stop
        # 55's run), although every destination topic had existed for 28 s. The same reader, after one metadata
        # request for every topic (waiting for the sampled ones: 0.3 s) and with a 5-s refresh, read them (not
        # traced further in librdkafka).
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"arrivals-{uuid.uuid4().hex[:6]}",
                                  "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                                  "auto.offset.reset": "latest", "fetch.wait.max.ms": 50,
                                  "topic.metadata.refresh.interval.ms": 5000})
        wanted = {(f"m.{t}", p) for t, p in sampled}
        self.waited_for_topics_s = wait_for(lambda: wanted <= known_partitions(self.consumer),
                                            "the sampled destination topics", 300)
        self.consumer.assign([TopicPartition(f"m.{t}", p, -1) for t, p in sampled])
        self.error: BaseException | None = None
        self.times: dict[str, list[float]] = {f"{t}[{p}]": [] for t, p in sampled}
        # Each arrival's record timestamp (its append time on the source, kept by the mirror), beside self.times: a
        # gap in arrivals whose records were on the source all along the gap is the mirror's (or this reader's),
        # not the live stream's.
        self.created: dict[str, list[float]] = {name: [] for name in self.times}
        # (wall time, records of the sampled partitions readable but not read yet) each second: this reader's own
        # backlog, told apart from the mirror's.
        self.behind: list[tuple[float, int]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                for msg in self.consumer.consume(10_000, 0.1):
                    if msg.error() is None:
                        name = f"{msg.topic()[2:]}[{msg.partition()}]"
                        self.times[name].append(time.time())
                        self.created[name].append(msg.timestamp()[1] / 1000)
                if not self.behind or time.time() - self.behind[-1][0] >= 1:
                    self.behind.append((round(time.time(), 2), self._backlog()))
        except BaseException as exc:  # a reader that died must not read as "no arrivals": main() raises it
            self.error = exc
        finally:
            self.consumer.close()

    def caught_up(self, within_s: float = 2.0, recent_s: float = 5.0) -> bool:
        """Every sampled partition's latest arrival is recent and was on the source under `within_s` before: the
        mirror keeps up with the live stream (a run that killed a worker while the workers were still 35 s behind
        measured their start-up backlog, not the kill)."""
        now = time.time()
        for name, stamps in self.times.items():
            if not stamps or now - stamps[-1] > recent_s or stamps[-1] - self.created[name][-1] > within_s:
                return False
        return True

    def check(self) -> None:
        """Raises if the reader died, or read nothing at all (its gaps would be the window, not the mirror's)."""
        if self.error is not None:
            raise RuntimeError(f"the arrivals reader failed: {self.error!r}") from self.error
        if not any(self.times.values()):
            raise RuntimeError("the arrivals reader read no record of any sampled partition: "
                               "its gaps would say nothing")

    def _backlog(self) -> int:
        backlog = 0
        for tp in self.consumer.position(self.consumer.assignment()):
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if tp.offset >= 0 and high >= 0:
                backlog += max(0, high - tp.offset)
        return backlog

    def dump(self, path: Path) -> None:
        path.write_text(json.dumps({name: list(zip(self.times[name], self.created[name])) for name in self.times}))

    def longest_gap(self, names: set[str], since: float, until: float) -> tuple[float, str]:
        """The longest wait between two arrivals of a partition (raw: also counts a live stream the source
        did not take)."""
        worst = (0.0, "")
        for name in names:
            stamps = [t for t in self.times.get(name, []) if since <= t <= until]
            points = [since, *stamps, until]
            gap = max(b - a for a, b in zip(points, points[1:]))
            worst = max(worst, (round(gap, 2), name))
        return worst

    def longest_mirror_gap(self, names: set[str], appended: dict[str, list[float]], since: float,
                           until: float) -> tuple[float, str]:
        """The longest wait of a partition on the mirror: mirror_gap over the window, for each of `names`."""
        worst = (0.0, "")
        for name in names:
            gap = mirror_gap(list(zip(self.times.get(name, []), self.created.get(name, []))),
                             appended.get(name, []), since, until)
            worst = max(worst, (round(gap, 2), name))
        return worst


def mirror_gap(arrivals: list[tuple[float, float]], appended: list[float], since: float, until: float) -> float:
    """The longest time within [since, until] that a partition's destination went without a record while its
    source already had the next one. `arrivals`: (arrival, source append time) of each record read on the
    destination (source topics stamp LogAppendTime, and the mirror keeps the timestamp); `appended`: the source
    append times the live producer was acknowledged, for the records not arrived yet.

    Arrivals alone also count the time the live stream's records spent reaching the source: at 1,000 partitions
    the source broker answered the bench's producer 2-45 s late, and every partition's arrivals stopped with
    it, whichever worker owned it. Only the wait while the source had the record is the mirror's. Records of a
    partition arrive in order, so the next to arrive is the next appended. The arrival clock and the source's
    are the same machine's."""
    worst, previous, last_appended = 0.0, since, float("-inf")
    for arrived, source_time in sorted(arrivals):
        last_appended = max(last_appended, source_time)
        if arrived <= since:
            continue
        worst = max(worst, min(arrived, until) - max(previous, source_time, since))
        if arrived >= until:
            return worst
        previous = arrived
    waiting = [t for t in appended if t > last_appended]  # on the source, never arrived
    if waiting and min(waiting) < until:
        worst = max(worst, until - max(previous, min(waiting), since))
    return worst


def most_behind(samples: list[tuple[float, int]], since: float, until: float) -> int:
    """The arrivals reader's largest backlog (records committed, not read yet) within [since, until]: a mirror's
    gap while it is large may be the reader's (one process produces the live stream and reads the arrivals; at
    load 10 the reader fell 4,000-7,000 committed records behind just before a kill)."""
    return max((backlog for t, backlog in list(samples) if since <= t <= until), default=0)


def settled(workers: list[Worker], everyone, hold_s: float = 10.0) -> bool:
    """Every partition owned, by workers that each own some, with no share changing for `hold_s`."""
    shares = [w.owned() for w in workers]
    if not everyone(workers) or not all(shares):
        return False
    time.sleep(hold_s)
    return [w.owned() for w in workers] == shares


def wait_for(condition, what: str, timeout: float) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)
    return round(time.monotonic() - started, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--width", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--delivery", choices=["at-least-once", "exactly-once"], default="exactly-once")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--sample-rate", type=float, default=10.0)
    parser.add_argument("--background-rate", type=float, default=1000.0)
    parser.add_argument("--kafka-heap-mb", type=int, default=768)
    parser.add_argument("--out", default=str(RESULTS / "width-group"))
    parser.add_argument("--logs", help="keep the workers' logs in this directory (default: a temporary one)")
    parser.add_argument("--broker-storage", choices=["memory", "disk"], default="memory",
                        help="the brokers' logs in tmpfs (default; bench.common.memory_root says why) or on disk")
    args = parser.parse_args(argv)
    args.run = uuid.uuid4().hex[:6]
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "width": args.width,
                    "workers": args.workers, "delivery": args.delivery, "broker_storage": args.broker_storage,
                    "load_start": os.getloadavg()[0]}
    base = f"wg{args.run}"
    topics = [f"{base}-{i}" for i in range(args.width // TOPIC_PARTITIONS)]
    step = max(1, args.width // args.sample)
    sampled = [(topics[i // TOPIC_PARTITIONS], i % TOPIC_PARTITIONS) for i in range(0, args.width, step)][:args.sample]
    if args.broker_storage == "memory":  # a live stream of ~3,000 records/s for a few minutes, and the indexes
        memory_root(2 * 2**30)
    with bench_stack(kafka_only=True, kafka_heap_mb=args.kafka_heap_mb, reuse_running=False,
                     storage=args.broker_storage) as stack, \
            tempfile.TemporaryDirectory(prefix="bench-width-group-") as scratch:
        tmp = args.logs or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        source, destination = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": source})
        for chunk in range(0, len(topics), 100):
            for future in admin.create_topics([NewTopic(t, TOPIC_PARTITIONS, 1, config=SOURCE_TOPIC_CONFIG)
                                                 for t in topics[chunk:chunk + 100]]).values():
                future.result(120)
        if args.delivery == "exactly-once":
            # The destination's transaction state made before the workers start, as bench.compare does: on fresh
            # brokers busy creating thousands of partitions, three workers' first init_transactions all waited past
            # their 30-s start-up timeout for it once (stop 56), and the run measured nothing.
            warm_destination_transactions(destination)
        live = Live(source, topics, sampled, args)
        live.start()
        workers = [Worker(i, args, source, destination, f"{base}-.*", Path(tmp)) for i in range(args.workers)]
        arrivals = None
        try:
            everyone = lambda ws: len(set().union(*(w.owned() for w in ws))) == args.width  # noqa: E731
            result["all_owned_s"] = wait_for(lambda: everyone(workers), "every partition owned", 600)
            # Every partition owned is not settled: two workers may own all while the third still joins (a 5,000 run
            # measured 2,500 / 1,667 / 0 ten seconds later). Settled: each owns some, the same for 10 s.
            result["settled_s"] = wait_for(lambda: settled(workers, everyone), "the workers' shares settled", 600)
            counts = [len(w.owned()) for w in workers]
            mean = args.width / args.workers
            result["balance"] = {"per_worker": counts, "max_deviation_pct": round(max(abs(c - mean) for c in counts) / mean * 100, 1)}
            arrivals = Arrivals(destination, sampled, args.delivery == "exactly-once")
            arrivals.start()
            result["reader_waited_for_topics_s"] = arrivals.waited_for_topics_s
            result["caught_up_s"] = wait_for(arrivals.caught_up, "the mirror caught up with the live stream", 600)
            time.sleep(10)
            before = {w.slot: w.owned() for w in workers}
            killed_at = result["killed_at"] = time.time()
            workers[0].stop(signal.SIGKILL)
            result["kill_reassigned_s"] = wait_for(lambda: everyone(workers[1:]), "the others own every partition", 300)
            time.sleep(20)
            after = {w.slot: w.owned() for w in workers[1:]}
            moved = sum(len(after[s] - before[s]) for s in after)
            kept = {f"{t}[{p}]" for t, p in sampled} - before[0]
            arrivals.check()
            live.check()
            result["kill"] = {"killed_owned": len(before[0]), "moved": moved,
                              "others_lost": sum(len(before[s] - after[s]) for s in after),
                              "longest_gap_kept_s": arrivals.longest_gap(kept, killed_at - 5, killed_at + 20),
                              "longest_mirror_gap_kept_s": arrivals.longest_mirror_gap(
                                  kept, live.appended, killed_at - 5, killed_at + 20),
                              "reader_most_behind": most_behind(arrivals.behind, killed_at - 5, killed_at + 20)}
            workers[0] = Worker(0, args, source, destination, f"{base}-.*", Path(tmp))
            added_at = result["added_at"] = time.time()
            result["add_reassigned_s"] = wait_for(lambda: len(workers[0].owned()) > 0 and everyone(workers),
                                                  "the added worker owns partitions", 300)
            time.sleep(20)
            final = {w.slot: w.owned() for w in workers}
            stayed = {f"{t}[{p}]" for t, p in sampled} - final[0]
            arrivals.check()
            live.check()
            result["add"] = {"added_owns": len(final[0]), "moved_from_others": sum(len(after[s] - final[s]) for s in after),
                             "longest_gap_stayed_s": arrivals.longest_gap(stayed, added_at - 5, added_at + 20),
                             "longest_mirror_gap_stayed_s": arrivals.longest_mirror_gap(
                                 stayed, live.appended, added_at - 5, added_at + 20),
                             "reader_most_behind": most_behind(arrivals.behind, added_at - 5, added_at + 20)}
        finally:
            live.halt.set()
            if arrivals is not None:
                arrivals.halt.set()
                if args.logs:  # the raw arrivals and the live stream's late ticks, to read a gap against the logs
                    arrivals.join(5)
                    arrivals.dump(Path(tmp) / "arrivals.json")
                    result["live_late_ticks"] = live.late[:50]
                    (Path(tmp) / "probes.json").write_text(json.dumps({"live_queued": live.queued,
                                                                       "reader_behind": arrivals.behind,
                                                                       "live_stats": live.stats}))
                    for name in ("source", "destination"):
                        for log_file in Path(stack[name].kafka.home).glob("*.log"):
                            shutil.copy(log_file, Path(tmp) / f"kafka-{name}-{log_file.name}")
            for worker in workers:
                worker.stop()
            delete_topics(source, base)
    result["load_end"] = os.getloadavg()[0]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
