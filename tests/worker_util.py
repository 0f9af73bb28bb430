"""Run the real mirror worker as a subprocess (`python -m mirror_worker`) and read what it mirrored."""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from devstack.paths import ROOT
from mirror_worker.commands.runner import CLOSE_GRACE_S
from mirror_worker.config.model import MirrorConfig


def scrape_metric(url: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples on a worker's metrics endpoint having `labels`; 0 when there is none."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    total = 0.0
    for match in re.finditer(rf'^{re.escape(name)}\{{([^}}]*)\}} (\S+)$', text, re.M):
        if all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
    return total


def write_properties(path: Path, settings: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return str(path)


# A worker bounds its own shutdown by shutdown-timeout-s (25 s by default) plus commands/runner.py's
# CLOSE_GRACE_S (5 s), then exits: the harness waits past that bound (10 s more) before it calls the worker hung.
EXIT_BOUND_S = MirrorConfig.model_fields["shutdown_timeout_s"].default + CLOSE_GRACE_S + 10


def _default_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_as(from_a_terminal: bool, open_files: int | None):
    if not from_a_terminal and open_files is None:
        return None

    def prepare() -> None:
        if from_a_terminal:
            _default_hangup()
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    return prepare


class WorkerProcess:
    """One `python -m mirror_worker` process with its stdout (JSON logs) and stderr in files."""

    def __init__(self, args: list[str], workdir: Path, name: str = "worker", from_a_terminal: bool = False,
                 open_files: int | None = None) -> None:
        """`from_a_terminal`: the worker starts with SIGHUP at its default, as from a shell, even when the test run
        itself is under nohup (whose SIG_IGN a child inherits, and the worker keeps: runner._handle_stops).
        `open_files`: the worker's limit of open files (`ulimit -n`)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = workdir / f"{name}.{time.monotonic_ns()}.out"
        self.stderr_path = self.stdout_path.with_suffix(".err")
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mirror_worker", *args],
                cwd=ROOT, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                # PYTHONFAULTHANDLER: SIGABRT prints every thread's stack (`stacks`, for a worker that hangs).
                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
                preexec_fn=_start_as(from_a_terminal, open_files),
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logs(self) -> list[dict]:
        entries = []
        for line in self.stdout_path.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                pass
        return entries

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for_log(self, message: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in self.logs():
                if entry.get("msg") == message:
                    return entry
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode} before {message!r}: {self.stderr[-2000:]}")
            time.sleep(0.2)
        raise AssertionError(f"worker did not log {message!r} within {timeout}s")

    def owned(self) -> dict[int, set[str]]:
        """Partitions each worker process (pid) holds now, from its assign/revoke logs."""
        owned: dict[int, set[str]] = {}
        for entry in self.logs():
            mine = owned.setdefault(entry["pid"], set())
            if entry.get("msg") == "partitions assigned":
                mine |= set(entry["partitions"])
            elif entry.get("msg") in ("partitions revoked", "partitions lost (not committed)"):
                mine -= set(entry["partitions"])
        return {pid: parts for pid, parts in owned.items() if parts}

    def wait_started(self, timeout: float = 60.0) -> None:
        self.wait_for_log("mirror started", timeout)
        self.wait_for_log("partitions assigned", timeout)

    def terminate(self, timeout: float = EXIT_BOUND_S, sig: signal.Signals = signal.SIGTERM) -> int:
        """SIGTERM (or `sig`), then the exit status; a worker still running after `timeout` fails the test with
        the stack of each of its threads and its last log lines (it is killed for them)."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logs = "\n".join(json.dumps(entry) for entry in self.logs()[-15:])
            raise AssertionError(f"worker still running {timeout:.0f}s after {sig.name}; last logs:\n{logs}\n"
                                 f"stacks:\n{self.stacks()[-6000:]}") from None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def stacks(self) -> str:
        """Where every thread of a hung worker is: SIGABRT (the worker dies) makes it print them on stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGABRT)
            self.proc.wait(10)
        text = self.stderr
        return text[text.find("Fatal Python error"):] if "Fatal Python error" in text else text[-3000:]

    def stop_quietly(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_while_running(condition, what: str, workers: list[WorkerProcess], timeout: float = 60.0) -> None:
    """Until condition() holds; fails the test when a worker exits meanwhile or the timeout passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in workers:
            assert worker.proc.poll() is None, f"{what}: a worker exited {worker.proc.returncode}: {worker.stderr[-1500:]}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.2)


def read_topic(bootstrap: str, topic: str, timeout: float = 10.0, idle: float = 3.0,
               isolation: str = "read_committed") -> list:
    """Everything in `topic` now, by assigning every partition from the beginning up to its end. The default
    is librdkafka's own, read_committed: exactly-once tests count duplicates with this reader, and the records
    of aborted transactions are not duplicates (`isolation="read_uncommitted"` shows them)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "test-read-topic", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": isolation,
    })
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        done, out = set(), []
        deadline = time.monotonic() + timeout
        while len(done) < len(partitions) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                        continue
                    raise KafkaException(msg.error())
                out.append(msg)
        return out
    finally:
        consumer.close()


def wait_for_count(bootstrap: str, topic: str, expected: int, timeout: float = 120.0, *, distinct: bool = False,
                   read_timeout: float = 10.0, interval: float = 1.0) -> list:
    """Read `topic` (read_topic, read_committed) until it holds at least `expected` records, or the timeout
    passes; the records of the last read either way (the caller asserts on them). `distinct` counts different
    values instead of records (a killed worker may have left copies); `read_timeout` is each read's (a large
    topic needs more than the default), `interval` the pause between reads."""
    deadline = time.monotonic() + timeout
    records: list = []
    while time.monotonic() < deadline:
        records = read_topic(bootstrap, topic, timeout=read_timeout)
        if len({m.value() for m in records} if distinct else records) >= expected:
            return records
        time.sleep(interval)
    return records


def by_partition(messages) -> dict[int, list]:
    out: dict[int, list] = defaultdict(list)
    for m in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        out[m.partition()].append(m)
    return out


def record_tuple(m) -> tuple:
    return (m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1])


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in result}
    finally:
        consumer.close()


def loss_and_duplicates(source_messages, destination_messages) -> tuple[list, int, bool]:
    """(missing source records, duplicate count, order of first occurrences kept per source partition).

    Records are identified by their value, which tests make unique.
    """
    source_values = [m.value() for m in source_messages]
    seen: dict[bytes, int] = defaultdict(int)
    first_order: dict[int, list] = defaultdict(list)
    for m in destination_messages:
        seen[m.value()] += 1
    missing = [v for v in source_values if seen[v] == 0]
    duplicates = sum(c - 1 for c in seen.values() if c > 1)
    source_partition_of = {m.value(): (m.partition(), m.offset()) for m in source_messages}
    first_seen: set = set()
    for m in sorted(destination_messages, key=lambda m: (m.partition(), m.offset())):
        v = m.value()
        if v in first_seen or v not in source_partition_of:
            continue
        first_seen.add(v)
        sp, so = source_partition_of[v]
        first_order[sp].append(so)
    ordered = all(offsets == sorted(offsets) for offsets in first_order.values())
    return missing, duplicates, ordered


def owned_partitions(worker: WorkerProcess) -> set[str]:
    return set().union(*worker.owned().values())


def write_mirror_spec(path: Path, stack, name: str, whitelist: str, prefix: str | None = "m.", *,
                      source: str | None = None, destination: str | None = None,
                      source_kafka: dict[str, str] | None = None, destination_kafka: dict[str, str] | None = None,
                      source_name: str | None = "east", group: str = "g", group_settings: dict | None = None,
                      **settings) -> Path:
    """A one-mirror YAML spec from the stack's source (alias `east`) to its destination, the tests' one spec
    builder. `settings` are extra mirror keys as the spec spells them (kebab-case), their values YAML as written
    (`**{"preserve-partitions": "true", "commit-interval-s": 1}`); `group_settings` likewise, the group's
    `settings:` mapping. `source`/`destination` replace the stack's bootstrap servers (a test's private broker,
    or any address where `stack` is None); `source_kafka`/`destination_kafka` add client settings (quoted
    strings). `prefix=None` and `source_name=None` leave those keys out; `group` names the group."""
    src = source or stack["source"].kafka.bootstrap_servers
    dst = destination or stack["destination"].kafka.bootstrap_servers

    def kafka(bootstrap: str, extra: dict[str, str] | None) -> str:
        more = "".join(f', {key}: "{value}"' for key, value in (extra or {}).items())
        return f'kafka: {{bootstrap.servers: "{bootstrap}"{more}}}'

    alias = f"name: {source_name}, " if source_name is not None else ""
    lines = ["groups:", f"  - name: {group}",
             f"    source: {{{alias}{kafka(src, source_kafka)}}}",
             f"    destination: {{{kafka(dst, destination_kafka)}}}"]
    if group_settings:
        lines += ["    settings:", *(f"      {key}: {value}" for key, value in group_settings.items())]
    lines += ["    mirrors:", f"      - name: {name}", f'        whitelist: "{whitelist}"']
    if prefix is not None:
        lines.append(f'        prefix: "{prefix}"')
    lines += [f"        {key}: {value}" for key, value in settings.items()]
    path.write_text("\n" + "\n".join(lines) + "\n")
    return path
