"""The skewroute-kafka Python data source against the embedded broker (Tansu's end-offset quirk included)."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import functions as F

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_producer
from connectors.kafka_offsets import make_probe_consumer, probe_ends
from connectors.spark_source import SHORT_NAME, kafka_options, register_source

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def _produce_one_batch(kafka, topic: str, partitions: int, per_partition: int) -> None:
    """Every partition's records in one producer batch: Tansu's high watermark then hides all but the first."""
    ensure_topics(make_admin(kafka), [TopicSpec(topic, partitions, exact=True)])
    p = make_producer(kafka, **{"linger.ms": 500, "batch.num.messages": 100_000, "batch.size": 64 << 20})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, key=b"k%d" % (i % 13), value=b'{"i":%d}' % i, partition=part)
    assert p.flush(30) == 0


def test_probe_finds_true_end_behind_watermark(kafka, topic) -> None:
    _produce_one_batch(kafka, topic, 2, 2500)
    c = make_probe_consumer(kafka.librdkafka("consumer"))
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        assert hi < 2500  # the quirk this source works around
        assert probe_ends(c, {topic: {"0": 0, "1": 0}}) == {topic: {"0": 2500, "1": 2500}}
        assert probe_ends(c, {topic: {"0": 100, "1": 2500}}, cap=1000) == {topic: {"0": 1100, "1": 2500}}
    finally:
        c.close()


def test_batch_read_delivers_every_record(spark, kafka, topic) -> None:
    _produce_one_batch(kafka, topic, 3, 2500)
    register_source(spark)
    df = spark.read.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic).load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.max("offset").alias("last")).collect()
    assert sorted((r["partition"], r["n"], r["last"]) for r in rows) == [(p, 2500, 2499) for p in range(3)]


@pytest.mark.both_brokers
def test_stream_delivers_every_record_once_within_budget(spark, kafka, topic, tmp_path) -> None:
    _produce_one_batch(kafka, topic, 4, 2500)
    register_source(spark)
    stream = (
        spark.readStream.format(SHORT_NAME)
        .options(**kafka_options(kafka))
        .option("subscribe", topic)
        .option("maxRecordsPerTrigger", "3000")
        .load()
    )
    name = "src_" + topic.replace("-", "_")
    q = (
        stream.select("partition", "offset")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    rows = spark.sql(f"select partition, offset from {name}").collect()
    assert len(rows) == 10_000 and len({(r[0], r[1]) for r in rows}) == 10_000
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 3000 and sum(sizes) == 10_000
    end = json.loads(q.recentProgress[-1]["sources"][0]["endOffset"])
    assert end == {topic: {str(p): 2500 for p in range(4)}}


def test_starting_offsets_latest_and_json(spark, kafka, topic, tmp_path) -> None:
    _produce_one_batch(kafka, topic, 2, 100)
    register_source(spark)
    base = spark.read.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic)
    spec = json.dumps({topic: {"0": 90, "1": -2}})
    assert base.option("startingOffsets", spec).load().count() == 10 + 100
    name = "latest_" + topic.replace("-", "_")
    q = (
        spark.readStream.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic)
        .option("startingOffsets", "latest").load()
        .writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds").start()
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not q.recentProgress and time.monotonic() < deadline:
            time.sleep(0.2)
        p = make_producer(kafka)
        for i in range(7):
            p.produce(topic, value=b"new%d" % i, partition=i % 2)
        p.flush(10)
        while spark.sql(f"select count(*) from {name}").first()[0] < 7 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert sorted(r[0] for r in spark.sql(f"select value from {name}").collect()) == [
            b"new%d" % i for i in range(7)
        ]
    finally:
        q.stop()


@pytest.mark.both_brokers
def test_transaction_markers_end_a_range(spark, kafka, topic) -> None:
    """Commit markers take offsets but are never delivered: a range ending in one must still complete."""
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 1, exact=True)])
    p = make_producer(kafka, **{"transactional.id": f"tx-{topic}"})
    p.init_transactions(10)
    for _ in range(2):
        p.begin_transaction()
        for i in range(250):
            p.produce(topic, value=b"v%d" % i, partition=0)
        p.commit_transaction(10)
    register_source(spark)
    df = (
        spark.read.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic)
        .option("readTimeoutMs", "5000").load()
    )  # fmt: skip
    assert df.count() == 500


def test_decode_routed_equals_spark_json_parsing(spark, kafka, topic) -> None:
    """decode=routed gives exactly the rows parse_routed computes with from_json from the raw Kafka columns."""
    from schemas.records import encode_routed, encode_routed_v2
    from spark_consumers.aggregations import parse_routed

    ensure_topics(make_admin(kafka), [TopicSpec(topic, 3, exact=True)])
    p = make_producer(kafka, **{"linger.ms": 50})
    for i in range(3000):  # formats 1 and 2 on one topic (a rolling upgrade), in runs of 7
        x = None if i % 5 == 0 else i / 4
        k, t = f"k{i % 17}", 1_700_000_000_000 + i
        if (i // 7) % 2:
            p.produce(topic, key=k, value=encode_routed_v2(t, 1, i, x, b"{}"), partition=i % 3)
        else:
            p.produce(topic, value=encode_routed(k, t, i % 3, topic, 1, i, x, b"{}"), partition=i % 3)
    p.produce(topic, value=b"garbage", partition=0)
    assert p.flush(30) == 0
    register_source(spark)
    base = spark.read.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic)
    decoded = parse_routed(base.option("decode", "routed").load())
    parsed = parse_routed(base.load())
    assert decoded.columns == parsed.columns
    got, want = sorted(map(tuple, decoded.collect()), key=repr), sorted(map(tuple, parsed.collect()), key=repr)
    assert len(got) == 3001 and got == want
