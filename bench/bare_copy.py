"""The practical ceiling: a bare confluent-kafka copy loop, consume -> produce, nothing else.

    .venv/bin/python -m bench.bare_copy --source HOST:PORT --destination HOST:PORT --topics T1,T2 \
        --prefix P --partitions 6 [--procs 1]

No consumer group, no commits, no bookkeeping, no metrics: each process is statically assigned the
source partitions p with p % procs == its index, from the beginning, and writes every record (key,
value, headers, timestamp) to the same partition of P + its topic. The client settings are the worker's defaults
(mirror_worker/config/librdkafka.py), so the comparison measures the worker's own overhead.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from mirror_worker.batch_api import (
    KAFKA_MAX_MESSAGE_BYTES, consumer_settings, fitted_to_topics, producer_settings,
)

BATCH = 10_000


def copy(source: str, destination: str, topics: list[str], prefix: str, partitions: list[int],
         destination_limit: int = KAFKA_MAX_MESSAGE_BYTES) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    consumer = Consumer({**consumer_settings({"bootstrap.servers": source}, "bare"), "group.id": "bench-bare"})
    settings = producer_settings({"bootstrap.servers": destination}, "bare", 100_000)
    # The batches the worker would fit to destination topics of that max.message.bytes.
    producer = Producer({**settings, **fitted_to_topics(settings, [destination_limit])})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in partitions])
    produce = producer.produce
    remote = {t: prefix + t for t in topics}
    while not stop:
        for msg in consumer.consume(BATCH, 0.5):
            if msg.error():
                continue
            while True:
                try:
                    # By position, as the worker (mirror_worker/clients/produce_positions.py): naming them costs
                    # ~0.5 us a record, which the ceiling should not pay.
                    produce(remote[msg.topic()], msg.value(), msg.key(), msg.partition(), None, None,
                            msg.timestamp()[1], msg.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--destination", required=True)
    parser.add_argument("--topics", required=True, help="comma-separated source topics")
    parser.add_argument("--prefix", required=True, help="destination topic = PREFIX + source topic")
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--destination-limit", type=int, default=KAFKA_MAX_MESSAGE_BYTES,
                        help="the destination topics' max.message.bytes (the batch size follows it, as the worker's)")
    args = parser.parse_args(argv)
    shares = [[p for p in range(args.partitions) if p % args.procs == i] for i in range(args.procs)]
    if args.procs == 1:
        copy(args.source, args.destination, args.topics.split(","), args.prefix, shares[0], args.destination_limit)
        return 0
    context = multiprocessing.get_context("spawn")
    topics = args.topics.split(",")
    children = [context.Process(target=copy, args=(args.source, args.destination, topics, args.prefix, s,
                                                    args.destination_limit))
                for s in shares]
    signal.signal(signal.SIGTERM, lambda *_: [c.terminate() for c in children if c.is_alive()])
    for child in children:
        child.start()
    for child in children:
        child.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
