"""Where final aggregates go: a Kafka results topic, Parquet files, or the console.

Kafka: one message per updated (window, key); the message key is ``"<window start ms>|<window end ms>|<key>"``
and the value is the JSON of the *full* aggregate (not a delta). A replayed micro-batch (after a restart from
the checkpoint) re-sends the same keys with the same or newer values, so a reader that keeps the last value per
message key -- or a compacted topic -- never double-counts. Written with confluent-kafka from each task of the
sink stage (``foreachBatch`` -> ``foreachPartition``), so the Python source needs no Kafka jar at all.

Parquet: Spark's file sink (exactly-once through its own commit log); output mode ``append`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

__all__ = ["attach_sink", "result_key", "results_json"]


def result_key(window_start_ms: int, window_end_ms: int, key: str) -> bytes:
    """The results-topic message key of one (window, key)."""
    return f"{window_start_ms}|{window_end_ms}|{key}".encode()


def results_json(df: DataFrame) -> DataFrame:
    """``rk`` (message key) and ``rv`` (JSON value) columns for the Kafka sink; times in epoch ms."""
    start_ms = F.unix_millis(F.col("window_start"))
    end_ms = F.unix_millis(F.col("window_end"))
    others = [c for c in df.columns if c not in ("window_start", "window_end")]
    return df.select(
        F.concat_ws("|", start_ms.cast("string"), end_ms.cast("string"), F.col("key")).alias("rk"),
        F.to_json(
            F.struct(start_ms.alias("window_start"), end_ms.alias("window_end"), *[F.col(c) for c in others])
        ).alias("rv"),
    )


def _produce_partition(conf: dict[str, Any], topic: str) -> Callable[[Iterator[Row]], None]:
    def produce(rows: Iterator[Row]) -> None:
        from confluent_kafka import Producer

        from schemas.exceptions import BrokerError

        producer = Producer({"linger.ms": 20, "enable.idempotence": True, "acks": "all", **conf})
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        for row in rows:
            while True:
                try:
                    producer.produce(topic, key=row["rk"].encode(), value=row["rv"].encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining or errors:
            raise BrokerError(f"results topic {topic!r}: {remaining} undelivered, errors: {errors[:3]}")

    return produce


def kafka_batch_writer(conf: dict[str, Any], topic: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing a micro-batch's updated aggregates to ``topic``."""
    produce = _produce_partition(conf, topic)

    def write(batch: DataFrame, _batch_id: int) -> None:
        results_json(batch).foreachPartition(produce)  # the only action on the batch: the plan runs once

    return write


def attach_sink(
    writer: DataStreamWriter,
    sink: str,
    *,
    kafka_conf: dict[str, Any] | None = None,
    results_topic: str | None = None,
    output_path: Path | None = None,
) -> DataStreamWriter:
    """Configure ``writer`` for ``sink`` (``kafka``, ``parquet``, ``console``, or ``noop`` for benchmarks)."""
    if sink == "kafka":
        if kafka_conf is None or results_topic is None:
            raise ValueError("the kafka sink needs kafka_conf and results_topic")
        return writer.foreachBatch(kafka_batch_writer(kafka_conf, results_topic))
    if sink == "parquet":
        if output_path is None:
            raise ValueError("the parquet sink needs output_path")
        return writer.format("parquet").option("path", str(output_path))
    if sink == "console":
        return writer.format("console").option("truncate", "false").option("numRows", 50)
    if sink == "noop":
        return writer.format("noop")
    raise ValueError(f"unknown sink {sink!r}; valid: kafka, parquet, console, noop")
