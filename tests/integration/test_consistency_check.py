"""The consistency check job on the real stack: source records, a hand-built mirror copy, exact counts.

Each Spark run starts a JVM, so the cases share runs where they can: a clean copy and a lagging mirror
(records beyond the committed offset) in one run, injected faults in another, a copy without provenance
headers checked over an --offsets window, and a timestamp window over the faulty copy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from devstack.paths import ROOT
from mirror_worker.policy.provenance import PROVENANCE_HEADER, provenance_value
from spark_jobs.common.connector import kafka_connector
from tests.kafka_util import create_topic, produce
from tests.worker_util import by_partition, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # the check's CLI starts Spark

PARTITIONS, PER_PARTITION = 3, 200
BASE_MS = 1_714_521_600_000            # 2024-05-01T00:00:00Z
KEEP = {"retention.ms": "-1"}           # the records' timestamps are old: time retention would drop them
SCRIPT = ["-m", "spark_jobs.consistency_check"]


# ------------------------------------------------------------------ helpers


def source_records(partitions: int = PARTITIONS, per_partition: int = PER_PARTITION) -> list[dict]:
    """Keyed records with headers; record n of partition p has timestamp BASE_MS + 10 n."""
    return [
        {"partition": p, "key": f"key-{p}-{n}".encode(), "value": f"value-{p}-{n}".encode(),
         "headers": [("trace", f"{p}.{n}".encode()), ("kind", b"order")], "timestamp": BASE_MS + 10 * n}
        for n in range(per_partition) for p in range(partitions)
    ]


def make_source(bootstrap: str, topic: str, records: list[dict], partitions: int = PARTITIONS) -> dict[int, list]:
    create_topic(bootstrap, topic, partitions=partitions, config=KEEP)
    produce(bootstrap, topic, records)
    messages = by_partition(read_topic(bootstrap, topic))
    assert sum(len(m) for m in messages.values()) == len(records)
    return messages


def cluster_id(bootstrap: str) -> str:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).cluster_id


def mirror_copy(bootstrap: str, topic: str, messages: list, source_cluster: str | None) -> None:
    """Copies `messages` in list order, each to its source partition with key, value, headers and timestamp,
    plus the provenance header when `source_cluster` is given (as the worker's --provenance.headers)."""
    create_topic(bootstrap, topic, partitions=PARTITIONS, config=KEEP)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    for m in messages:
        headers = list(m.headers() or [])
        if source_cluster is not None:
            headers.append((PROVENANCE_HEADER, provenance_value(
                "source", source_cluster, m.topic(), m.partition(), m.offset())))
        producer.produce(topic, m.value(), m.key(), m.partition(), timestamp=m.timestamp()[1], headers=headers)
        producer.poll(0)
    assert producer.flush(30) == 0


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, report: Path, seconds: float) -> None:
        self.rc, self.stdout, self.stderr, self.seconds = proc.returncode, proc.stdout, proc.stderr, seconds
        self.report_path = report
        self.report = json.loads(report.read_text()) if report.exists() else None

    def partition(self, topic: str, partition: int) -> dict:
        return next(p for p in self.report["partitions"] if (p["topic"], p["partition"]) == (topic, partition))

    def counts(self, topic: str, partition: int) -> dict:
        row = self.partition(topic, partition)
        return {k: v for k, v in row.items() if k not in ("topic", "partition")}

    def logs(self) -> list[dict]:
        out = []
        for line in self.stdout.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


def run_check(stack, tmp_path: Path, *args: str, source: str | None = None, name: str = "report") -> Run:
    report = tmp_path / f"{name}.json"
    command = [sys.executable, *SCRIPT,
               "--source.bootstrap.servers", source or stack["source"].kafka.bootstrap_servers,
               "--destination.bootstrap.servers", stack["destination"].kafka.bootstrap_servers,
               "--report", str(report), *args]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=480)
    return Run(proc, report, time.monotonic() - started)


def zero_counts(source_count: int, **overrides) -> dict:
    return {"source_count": source_count, "destination_count": source_count, "missing": 0, "duplicated": 0,
            "altered": 0, "out_of_order": 0, "wrong_schema": 0, "beyond_committed": 0, **overrides}


def assert_html(run: Run) -> None:
    html = run.report_path.with_suffix(".html").read_text()
    status = run.report["status"]
    assert f'<span class="status {status}">{status}</span>' in html
    for p in run.report["partitions"]:
        assert f"<td>{p['topic']}</td>" in html


# ------------------------------------------------------------------ a faulty copy, shared by two runs


@pytest.fixture(scope="module")
def faulty(stack):
    """A source topic and a provenance-headed copy with injected faults (see FAULTS)."""
    import uuid

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = f"cc-faults-{uuid.uuid4().hex[:12]}"
    messages = make_source(src, topic, source_records())
    omitted = {(0, 10), (0, 11), (1, 50), (2, 100), (2, 199)}
    duplicated_next = {(0, 20), (2, 30)}              # copied twice in a row
    duplicated_last = {(1, 60)}                       # copied again after the whole partition
    altered = (1, 70)
    swapped = (2, 150)                                # 150 and 151 change places
    copies = []
    for p in range(PARTITIONS):
        ordered = list(messages[p])
        i = swapped[1]
        if p == swapped[0]:
            ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
        for m in ordered:
            coord = (p, m.offset())
            if coord in omitted:
                continue
            copies.append(_Altered(m) if coord == altered else m)
            if coord in duplicated_next:
                copies.append(m)
        copies.extend(m for m in messages[p] if (p, m.offset()) in duplicated_last)
    mirror_copy(dst, "dc1." + topic, copies, cluster_id(src))
    return topic


class _Altered:
    """A consumed message whose value was changed on the way."""

    def __init__(self, message) -> None:
        self._m = message

    def value(self) -> bytes:
        return self._m.value() + b"!"

    def __getattr__(self, name):
        return getattr(self._m, name)


# ------------------------------------------------------------------ runs


def test_clean_copy_and_a_lagging_mirror_are_consistent(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    clean, lagging = topic_name("cc-clean"), topic_name("cc-lag")
    group = topic_name("cc-group")
    source_cluster = cluster_id(src)
    clean_messages = make_source(src, clean, source_records())
    mirror_copy(dst, "dc1." + clean, [m for p in range(PARTITIONS) for m in clean_messages[p]], source_cluster)
    lag_messages = make_source(src, lagging, source_records())
    # The mirror committed 150 on partition 0 (and copied no further), 180 on partition 1 (copied up to 190,
    # not yet committed), nothing on partition 2 (copied completely).
    copied = lag_messages[0][:150] + lag_messages[1][:190] + lag_messages[2]
    mirror_copy(dst, "dc1." + lagging, copied, source_cluster)
    commit(src, group, [TopicPartition(lagging, 0, 150), TopicPartition(lagging, 1, 180)])

    run = run_check(stack, tmp_path, "--topics", f"{clean},{lagging}", "--prefix", "dc1.", "--group.id", group)

    assert run.rc == 0, run.stderr[-3000:]
    assert run.report["status"] == "ok"
    assert run.report["totals"] == {"checked": 2 * PARTITIONS * PER_PARTITION, "missing": 0, "duplicated": 0,
                                    "altered": 0, "out_of_order": 0, "wrong_schema": 0}
    for p in range(PARTITIONS):
        assert run.counts(clean, p) == zero_counts(PER_PARTITION)
    assert run.counts(lagging, 0) == zero_counts(200, destination_count=150, beyond_committed=50)
    assert run.counts(lagging, 1) == zero_counts(200, destination_count=190, beyond_committed=20)
    assert run.counts(lagging, 2) == zero_counts(200)
    assert run.report["source"]["cluster_id"] == source_cluster
    assert run.report["window"]["kind"] == "all"
    committed = {(r["topic"], r["partition"]): r["committed"] for r in run.report["window"]["ranges"]}
    assert committed[(lagging, 0)] == 150 and committed[(lagging, 2)] is None and committed[(clean, 0)] is None
    assert all(v == [] for v in run.report["examples"].values())
    checked = [e for e in run.logs() if e.get("msg") == "partition checked"]
    assert len(checked) == 2 * PARTITIONS
    assert_html(run)


def test_injected_faults_are_counted_exactly(stack, faulty, tmp_path):
    run = run_check(stack, tmp_path, "--topics", faulty, "--prefix", "dc1.")

    assert run.rc == 1, run.stderr[-3000:]
    assert run.report["status"] == "inconsistent"
    assert run.report["totals"] == {"checked": PARTITIONS * PER_PARTITION, "missing": 5, "duplicated": 3,
                                    "altered": 1, "out_of_order": 1, "wrong_schema": 0}
    assert run.counts(faulty, 0) == zero_counts(200, destination_count=199, missing=2, duplicated=1)
    assert run.counts(faulty, 1) == zero_counts(200, destination_count=200, missing=1, duplicated=1, altered=1)
    assert run.counts(faulty, 2) == zero_counts(200, destination_count=199, missing=2, duplicated=1, out_of_order=1)
    assert run.report["examples"] == {
        "missing": [f"{faulty}:0:10", f"{faulty}:0:11", f"{faulty}:1:50", f"{faulty}:2:100", f"{faulty}:2:199"],
        "duplicated": [f"{faulty}:0:20", f"{faulty}:1:60", f"{faulty}:2:30"],
        "altered": [f"{faulty}:1:70"],
        "out_of_order": [f"{faulty}:2:150"],
        "wrong_schema": [],
    }
    assert_html(run)
    html = run.report_path.with_suffix(".html").read_text()
    assert f"{faulty}:2:199" in html and f"{faulty}:1:70" in html


def test_timestamp_window_ignores_records_outside_it(stack, faulty, tmp_path):
    # Offsets 100..149 of every partition (timestamps BASE_MS + 10 n); of the faults only 2:100 is inside.
    run = run_check(stack, tmp_path, "--topics", faulty, "--prefix", "dc1.",
                    "--from-timestamp", "2024-05-01T00:00:01Z", "--to-timestamp", str(BASE_MS + 1500))

    assert run.rc == 1, run.stderr[-3000:]
    assert run.report["totals"] == {"checked": 150, "missing": 1, "duplicated": 0, "altered": 0, "out_of_order": 0,
                                    "wrong_schema": 0}
    assert run.report["examples"]["missing"] == [f"{faulty}:2:100"]
    assert [(r["from"], r["to"]) for r in run.report["window"]["ranges"]] == [(100, 150)] * PARTITIONS
    assert run.report["window"]["from_timestamp"] == BASE_MS + 1000
    assert run.counts(faulty, 2) == zero_counts(50, destination_count=49, missing=1)


def test_copy_without_provenance_is_mapped_by_position(stack, topic_name, tmp_path):
    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    topic = topic_name("cc-plain")
    records = source_records()
    tie_ts = BASE_MS + 10 * 120 + 5                   # three records with one key and one timestamp
    records += [{"partition": 1, "key": b"same", "value": f"tie-{i}".encode(), "timestamp": tie_ts}
                for i in range(3)]
    messages = make_source(src, topic, records)
    lost = messages[1][100]
    copies = [m for p in range(PARTITIONS) for m in messages[p] if m is not lost]
    mirror_copy(dst, topic, copies, source_cluster=None)

    run = run_check(stack, tmp_path, "--topics", topic,
                    "--offsets", f"{topic}:0:0-200,{topic}:1:10-203")

    assert run.rc == 1, run.stderr[-3000:]
    assert run.report["totals"] == {"checked": 393, "missing": 1, "duplicated": 0, "altered": 0, "out_of_order": 0,
                                    "wrong_schema": 0}
    assert run.report["examples"]["missing"] == [f"{topic}:1:{lost.offset()}"]
    assert [p["partition"] for p in run.report["partitions"]] == [0, 1]   # only the listed partitions
    assert run.counts(topic, 0) == zero_counts(200)
    assert run.counts(topic, 1) == zero_counts(193, destination_count=192, missing=1)
    assert run.report["window"]["kind"] == "offsets"
    assert_html(run)


# ------------------------------------------------------------------ bad input: exit 2, one line, no Spark


@pytest.fixture(scope="module")
def existing(stack):
    import uuid

    src, dst = stack["source"].kafka.bootstrap_servers, stack["destination"].kafka.bootstrap_servers
    name = f"cc-input-{uuid.uuid4().hex[:12]}"
    create_topic(src, name, partitions=3)
    create_topic(dst, "dc1." + name, partitions=3)
    only_source = f"cc-nodest-{uuid.uuid4().hex[:12]}"
    create_topic(src, only_source, partitions=1)
    return name, only_source


@pytest.mark.parametrize("case", [
    "unknown-topic", "unknown-destination-topic", "from-after-to", "malformed-offsets", "offsets-partition",
    "offsets-and-timestamps", "unknown-flag", "bad-timestamp",
])
def test_bad_input_exits_2_with_one_line(stack, existing, tmp_path, case):
    topic, only_source = existing
    args, message = {
        "unknown-topic": (["--topics", "cc-no-such-topic-x"],
                          "unknown topic 'cc-no-such-topic-x' on the source cluster"),
        "unknown-destination-topic": (["--topics", only_source, "--prefix", "dc1."],
                                      f"unknown topic 'dc1.{only_source}' on the destination cluster"),
        "from-after-to": (["--topics", topic, "--from-timestamp", "2024-05-02T00:00:00Z",
                           "--to-timestamp", str(BASE_MS)],
                          "bad window: --from-timestamp 2024-05-02T00:00:00.000Z is not before "
                          "--to-timestamp 2024-05-01T00:00:00.000Z"),
        "malformed-offsets": (["--topics", topic, "--offsets", f"{topic}:0:10"],
                              f"--offsets: '{topic}:0:10' is not topic:partition:from-to"),
        "offsets-partition": (["--topics", topic, "--prefix", "dc1.", "--offsets", f"{topic}:7:0-10"],
                              f"--offsets: topic '{topic}' has 3 partitions on the source cluster; 7 is not one"),
        "offsets-and-timestamps": (["--topics", topic, "--offsets", f"{topic}:0:0-1", "--to-timestamp", "5"],
                                   "--offsets cannot be combined with --from-timestamp/--to-timestamp"),
        "unknown-flag": (["--topics", topic, "--windw", "5"], "unrecognized arguments: --windw 5"),
        "bad-timestamp": (["--topics", topic, "--from-timestamp", "last tuesday"],
                          "--from-timestamp: 'last tuesday' is neither epoch milliseconds nor an ISO-8601 time"),
    }[case]
    run = run_check(stack, tmp_path, *args)
    assert (run.rc, run.stderr) == (2, f"consistency_check: {message}\n")
    assert run.report is None and run.seconds < 30


def test_unreachable_cluster_exits_2_within_the_metadata_timeout(stack, existing, tmp_path):
    run = run_check(stack, tmp_path, "--topics", existing[0], source="127.0.0.1:1")
    assert run.rc == 2
    assert run.stderr.startswith("consistency_check: source cluster unreachable at 127.0.0.1:1 within 8s: ")
    assert run.stderr.count("\n") == 1 and run.stderr.endswith("\n")
    assert run.report is None and run.seconds < 30


def test_a_missing_jvm_digest_reader_exits_3_with_one_line_naming_make_setup(stack, existing, tmp_path, monkeypatch):
    """The connector jars and the package without mirror-check.jar (a setup that did not build it): the check cannot complete,
    says why in one line, and is not mistaken for an inconsistent mirror (exit 1)."""
    jars = tmp_path / "jars"
    jars.mkdir()
    for jar in kafka_connector({}).jars:
        if not jar.endswith("mirror-check.jar"):
            (jars / Path(jar).name).symlink_to(jar)
    monkeypatch.setenv("SPARK_KAFKA_JARS", str(jars))
    monkeypatch.setenv("MIRROR_CHECK_JAR", "")  # nor the package's
    run = run_check(stack, tmp_path, "--topics", existing[0], "--prefix", "dc1.", "--master", "local[1]")
    assert run.rc == 3, run.stderr[-2000:]
    # Spark's JVM writes its own start-up lines to stderr first; the check's verdict is its one line.
    assert [line for line in run.stderr.splitlines() if line.startswith("consistency_check")] == [
        "consistency_check: check failed: the digest pass's JVM reader is not on Spark's classpath: "
        "mirror-check.jar is missing from spark_jobs/jars/ and the Kafka connector jars (run `make setup`)"]
    assert run.stderr.endswith("(run `make setup`)\n")
    assert run.report is None
