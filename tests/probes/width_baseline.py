"""Baseline for issue 42: one worker, N partitions (topics of 10), 100,000 records of 100 B, at-least-once vs
exactly-once: seconds from launch to the last record, peak threads, peak fds, peak RSS."""
import os, subprocess, sys, tempfile, time, threading
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]; sys.path.insert(0, str(ROOT))
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_util import private_kafka

RECORDS = 100_000

def sample(pid, peak, stop):
    while not stop.is_set():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            threads = int(next(l.split()[1] for l in status.splitlines() if l.startswith("Threads:")))
            rss = int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmRSS:"))) // 1024
            fds = len(os.listdir(f"/proc/{pid}/fd"))
            peak["threads"] = max(peak.get("threads", 0), threads)
            peak["rss_mib"] = max(peak.get("rss_mib", 0), rss)
            peak["fds"] = max(peak.get("fds", 0), fds)
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            pass
        time.sleep(0.2)

def end_total(bs, topics, parts):
    c = Consumer({"bootstrap.servers": bs, "group.id": "probe", "isolation.level": "read_committed"})
    total = 0
    for t in topics:
        for p in range(parts):
            lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=10)
            total += hi
    c.close()
    return total

def run(bs_src, bs_dst, topics, parts, eos, work):
    tag = "eos" if eos else "alo"
    src_props = work / f"src-{tag}.properties"; src_props.write_text(f"bootstrap.servers={bs_src}\ngroup.id=g-{tag}-{len(topics)}\nauto.offset.reset=earliest\n")
    dst_props = work / f"dst-{tag}.properties"; dst_props.write_text(f"bootstrap.servers={bs_dst}\n")
    prefix = f"{tag}{len(topics)}."
    args = [sys.executable, "-m", "mirror_worker", "--consumer.config", str(src_props), "--producer.config", str(dst_props),
            "--whitelist", f"w{len(topics)}\\..*", "--prefix", prefix, "--preserve.partitions"] + (["--exactly.once"] if eos else [])
    t0 = time.time()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=open(work / f"{tag}.out", "w"), stderr=subprocess.STDOUT)
    peak, stop = {}, threading.Event()
    th = threading.Thread(target=sample, args=(proc.pid, peak, stop)); th.start()
    dst_topics = [prefix + t for t in topics]
    done_at = None
    while time.time() - t0 < 600:
        time.sleep(1)
        try:
            if end_total(bs_dst, dst_topics, parts) >= RECORDS:
                done_at = time.time() - t0; break
        except Exception:
            pass
        if proc.poll() is not None:
            break
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    stop.set(); th.join()
    return {"mode": tag, "partitions": len(topics) * parts, "seconds_to_last_record": round(done_at, 1) if done_at else None, **peak}

def main():
    n_topics = int(sys.argv[1]); parts = 10
    with tempfile.TemporaryDirectory() as home, private_kafka(Path(home) / "src", **{"num.partitions": "10"}) as src, \
            private_kafka(Path(home) / "dst", **{"num.partitions": "10"}) as dst:
        topics = [f"w{n_topics}.t{i:04d}" for i in range(n_topics)]
        admin = AdminClient({"bootstrap.servers": src.bootstrap_servers})
        for f in admin.create_topics([NewTopic(t, parts, 1) for t in topics]).values():
            f.result(120)
        p = Producer({"bootstrap.servers": src.bootstrap_servers, "linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000})
        value = b"x" * 100
        for i in range(RECORDS):
            p.produce(topics[i % n_topics], value, partition=(i // n_topics) % parts)
            if i % 10000 == 0: p.poll(0)
        p.flush(120)
        for eos in (False, True):
            print(run(src.bootstrap_servers, dst.bootstrap_servers, topics, parts, eos, Path(home)), flush=True)

main()
