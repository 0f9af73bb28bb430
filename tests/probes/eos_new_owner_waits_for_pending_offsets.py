"""Probe 2: offsets accepted in A's transaction, then a rebalance hands the partitions to B, then A commits.
Does B's committed() (read_committed: require_stable) wait for A's transaction and return A's new position?"""
import sys, time, tempfile, threading
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from confluent_kafka import Consumer, Producer, TopicPartition, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_util import private_kafka

def consumer(bs, name):
    c = Consumer({"bootstrap.servers": bs, "group.id": "pos", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "session.timeout.ms": 6000, "max.poll.interval.ms": 10000,
                  "heartbeat.interval.ms": 1000, "client.id": name})
    assigned = []
    c.subscribe(["d"], on_assign=lambda cc, ps: assigned.extend(ps))
    return c, assigned

with tempfile.TemporaryDirectory() as home, private_kafka(Path(home)) as node:
    bs = node.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs}); admin.create_topics([NewTopic("d", 1, 1)])["d"].result(30)
    a, a_assigned = consumer(bs, "A")
    while not a_assigned:
        a.poll(0.5)
    pa = Producer({"bootstrap.servers": bs, "transactional.id": "worker-A", "transaction.timeout.ms": 60000})
    pa.init_transactions(30)
    meta_a = a.consumer_group_metadata()
    pa.begin_transaction()
    pa.produce("d", b"A-1", partition=0)
    pa.send_offsets_to_transaction([TopicPartition("d", 0, 1)], meta_a, 30)
    print("A's offsets accepted; A freezes before its commit")
    b, b_assigned = consumer(bs, "B")
    t0 = time.time()
    while not b_assigned and time.time() - t0 < 90:
        b.poll(0.5)
    print("B assigned after", round(time.time() - t0, 1), "s")
    out = {}
    def fetch():
        t = time.time()
        try:
            out["pos"] = [(p.partition, p.offset) for p in b.committed([TopicPartition("d", 0)], 40)]
        except KafkaException as exc:
            out["pos"] = exc.args[0].str()
        out["s"] = round(time.time() - t, 1)
    th = threading.Thread(target=fetch); th.start()
    time.sleep(5)
    print("B's fetch after 5 s:", out or "still waiting")
    try:
        pa.commit_transaction(30)
        print("A's commit: ok")
    except KafkaException as exc:
        print("A's commit refused:", exc.args[0].str())
    th.join(60)
    print("B's fetch:", out)
    b.close()
