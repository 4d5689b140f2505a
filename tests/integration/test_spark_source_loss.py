"""The data source across restarts: a short advertised end never double counts; lost offsets fail or are skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from pyspark.errors import StreamingQueryException

from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin, make_producer
from connectors.kafka_offsets import make_probe_consumer
from connectors.spark_source import SHORT_NAME, kafka_options, register_source
from spark_consumers.observability import CombinerMetricsListener

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]


def _produce(kafka: Any, topic: str, partitions: int, per_partition: int, one_batch: bool = True) -> None:
    """``per_partition`` records into each partition, each partition's in one producer batch (Tansu then
    advertises a high watermark of the batch's first offset + 1)."""
    conf = {"linger.ms": 500, "batch.num.messages": 100_000, "batch.size": 64 << 20} if one_batch else {}
    p = make_producer(kafka, **conf)  # a new producer every time: never one that saw a deleted topic
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, value=b'{"i":%d}' % i, partition=part)
    assert p.flush(30) == 0


def _run_once(spark: Any, kafka: Any, topic: str, tmp_path: Path, **opts: str) -> Any:
    """One available-now run over ``topic`` into Parquet (partition, offset), same checkpoint every time."""
    register_source(spark)
    df = spark.readStream.format(SHORT_NAME).options(**kafka_options(kafka)).option("subscribe", topic)
    df = df.options(**opts).load().select("partition", "offset")
    q = (
        df.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(300)
    except StreamingQueryException:
        pass  # the caller inspects q.exception()
    finally:
        q.stop()
    return q


def _rows(spark: Any, tmp_path: Path) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in spark.read.parquet(str(tmp_path / "out")).collect()]


def test_available_now_restarted_twice_with_short_advertised_end_never_double_counts(spark, kafka, topic, tmp_path):
    ensure_topics(make_admin(kafka), [TopicSpec(topic, 3, exact=True)])
    _produce(kafka, topic, 3, 2000)
    c = make_probe_consumer(kafka.librdkafka("consumer"))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1] < 2000  # short end
    finally:
        c.close()
    assert _run_once(spark, kafka, topic, tmp_path).exception() is None
    assert len(_rows(spark, tmp_path)) == 6000
    # restart 1: the probe gives up at once, so the target falls back to the short advertised end (below the
    # checkpointed start): it must plan nothing, never an end below the start
    assert _run_once(spark, kafka, topic, tmp_path, probeTimeoutMs="1").exception() is None
    _produce(kafka, topic, 3, 500)
    assert _run_once(spark, kafka, topic, tmp_path).exception() is None  # restart 2: only the new records
    rows = _rows(spark, tmp_path)
    assert len(rows) == len(set(rows)) == 7500
    assert sorted(rows) == [(p, o) for p in range(3) for o in range(2500)]


def test_recreated_topic_under_checkpoint_fails_clearly_or_skips(spark, kafka, topic, tmp_path):
    admin = make_admin(kafka)
    ensure_topics(admin, [TopicSpec(topic, 2, exact=True)])
    _produce(kafka, topic, 2, 100, one_batch=False)
    assert _run_once(spark, kafka, topic, tmp_path).exception() is None
    for fut in admin.delete_topics([topic], operation_timeout=15).values():
        fut.result(15)
    ensure_topics(admin, [TopicSpec(topic, 2, exact=True)])
    _produce(kafka, topic, 2, 10, one_batch=False)

    failed = _run_once(spark, kafka, topic, tmp_path)
    err = str(failed.exception())
    assert f"data loss on topic '{topic}' partition 0: expected offset 100, the broker has offsets 0..10" in err
    assert "failOnDataLoss=false" in err
    assert len(_rows(spark, tmp_path)) == 200  # nothing of the new topic was read as the old one's offsets

    listener = CombinerMetricsListener(spark)
    spark.streams.addListener(listener)
    try:
        assert _run_once(spark, kafka, topic, tmp_path, failOnDataLoss="false").exception() is None
        _produce(kafka, topic, 2, 5, one_batch=False)
        assert _run_once(spark, kafka, topic, tmp_path, failOnDataLoss="false").exception() is None
    finally:
        spark.streams.removeListener(listener)
    rows = _rows(spark, tmp_path)
    # skipped like Spark's source: the lost positions and what the new topic held then; read on from its end
    assert sorted(rows) == sorted(
        [(p, o) for p in range(2) for o in range(100)] + [(p, o) for p in range(2) for o in range(10, 15)]
    )
    assert sum(s.skipped_partitions for s in listener.stats) == 2
