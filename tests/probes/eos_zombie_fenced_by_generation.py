"""Probe: can a destination-cluster consumer group's generation fence a zombie's transactional positions (KIP-447)
when the records come from elsewhere? One broker; group 'pos' subscribed to topic 'd'; A commits, freezes; B joins
and takes over; A (stale metadata) tries to commit records + positions."""
import sys, time, tempfile
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from confluent_kafka import Consumer, Producer, TopicPartition, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_util import private_kafka

def consumer(bs, name, extra=None):
    c = Consumer({"bootstrap.servers": bs, "group.id": "pos", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "session.timeout.ms": 6000, "max.poll.interval.ms": 10000,
                  "heartbeat.interval.ms": 1000, "client.id": name, **(extra or {})})
    assigned = []
    c.subscribe(["d"], on_assign=lambda cc, ps: assigned.extend(ps), on_revoke=lambda cc, ps: print(name, "revoked", ps))
    return c, assigned

def producer(bs, tid):
    p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    return p

with tempfile.TemporaryDirectory() as home, private_kafka(Path(home)) as node:
    bs = node.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bs}); admin.create_topics([NewTopic("d", 2, 1)])["d"].result(30)
    a, a_assigned = consumer(bs, "A")
    t0 = time.time()
    while len(a_assigned) < 2 and time.time() - t0 < 60:
        a.poll(0.5)
    print("A assigned", [(t.topic, t.partition) for t in a_assigned])
    pa = producer(bs, "worker-A")
    meta_a = a.consumer_group_metadata()
    pa.begin_transaction()
    pa.produce("d", b"A-first", partition=0)
    pa.send_offsets_to_transaction([TopicPartition("d", 0, 1), TopicPartition("d", 1, 0)], meta_a, 30)
    pa.commit_transaction(30)
    print("A committed first transaction")
    # A freezes (no poll). B joins.
    b, b_assigned = consumer(bs, "B")
    t0 = time.time()
    while len(b_assigned) < 2 and time.time() - t0 < 90:
        b.poll(0.5)
    print("B assigned", [(t.topic, t.partition) for t in b_assigned], "after", round(time.time() - t0, 1), "s")
    print("B reads committed positions:", [(t.partition, t.offset) for t in b.committed([TopicPartition("d", 0), TopicPartition("d", 1)], 30)])
    # Zombie A: its old metadata, its producer still alive.
    pa.begin_transaction()
    pa.produce("d", b"A-zombie", partition=0)
    try:
        pa.send_offsets_to_transaction([TopicPartition("d", 0, 2)], meta_a, 30)
        print("zombie send_offsets accepted")
        pa.commit_transaction(30)
        print("ZOMBIE COMMITTED (fencing failed)")
    except KafkaException as exc:
        err = exc.args[0]
        print("zombie refused:", err.name(), err.str(), "abortable" if err.txn_requires_abort() else "", "fatal" if err.fatal() else "")
        try:
            pa.abort_transaction(30)
            print("zombie aborted")
        except KafkaException as exc2:
            print("abort:", exc2.args[0].str())
    # What read_committed sees on d[0]
    r = Consumer({"bootstrap.servers": bs, "group.id": "reader", "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    r.assign([TopicPartition("d", 0, 0)])
    seen = []
    t0 = time.time()
    while time.time() - t0 < 5:
        m = r.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.value())
    print("read_committed d[0]:", seen)
    print("positions now:", [(t.partition, t.offset) for t in b.committed([TopicPartition("d", 0), TopicPartition("d", 1)], 30)])
    for c in (r, b):
        c.close()
