"""Spark local mode reads the stack's Kafka through the connector jars that `make setup` fetched."""

from __future__ import annotations

import pytest

from tests.kafka_util import create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_spark_batch_reads_exact_offset_range_with_headers(stack, spark, topic_name):
    bootstrap = stack["source"].kafka.bootstrap_servers
    topic = topic_name("spark")
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2, "headers": [("n", str(i).encode())]}
        for i in range(20)
    ])

    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", f'{{"{topic}": {{"0": 2, "1": 0}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": 7, "1": 10}}}}')
        .load()
        .selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "headers")
        .collect()
    )

    got = sorted((r.partition, r.offset, r.key, r.headers[0].value.decode()) for r in rows)
    expected = sorted(
        [(0, o, f"k{2 * o}", str(2 * o)) for o in range(2, 7)] + [(1, o, f"k{2 * o + 1}", str(2 * o + 1)) for o in range(10)]
    )
    assert got == expected
