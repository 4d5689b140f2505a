"""Where final aggregates go: a Kafka results topic, Parquet files, or the console.

Kafka: one message per updated (window, key); the message key is ``"<window start ms>|<window end ms>|<key>"``
and the value is the JSON of the *full* aggregate (not a delta). A replayed micro-batch (after a restart from
the checkpoint) re-sends the same keys with the same or newer values, so a reader that keeps the last value per
message key -- or a compacted topic -- never double-counts. Written with confluent-kafka from each task of the
sink stage (``foreachBatch`` -> ``mapInArrow``), so the Python source needs no Kafka jar at all.

Parquet: Spark's file sink (exactly-once through its own commit log); output mode ``append`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

if TYPE_CHECKING:
    import pyarrow as pa

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


#: One producer per configuration per Python worker process (Spark reuses Python workers across tasks), so a
#: sink task skips creating a client, connecting and, with idempotence, fetching a producer id.
_PRODUCERS: dict[tuple[tuple[str, str], ...], Any] = {}


def _pooled_producer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    full = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", **conf}
    key = tuple(sorted((k, str(v)) for k, v in full.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(full)
    return producer


def _produce_batches(conf: dict[str, Any], topic: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Any]]:
    """A ``mapInArrow`` function: produce every ``(rk, rv)`` row, flush, yield one row with the count."""

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from schemas.exceptions import BrokerError

        producer = _pooled_producer(conf)
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        sent = 0
        for batch in batches:
            keys, values = batch.column(0).to_pylist(), batch.column(1).to_pylist()
            for k, v in zip(keys, values, strict=True):
                while True:
                    try:
                        producer.produce(topic, key=k, value=v, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
            sent += len(keys)
            producer.poll(0)
        remaining = producer.flush(60)
        if remaining or errors:
            raise BrokerError(f"results topic {topic!r}: {remaining} undelivered, errors: {errors[:3]}")
        yield pa.RecordBatch.from_pydict({"sent": [sent]}, schema=pa.schema([("sent", pa.int64())]))

    return produce


def kafka_batch_writer(conf: dict[str, Any], topic: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing a micro-batch's updated aggregates to ``topic``.

    The rows reach Python as Arrow batches (``mapInArrow``), not pickled ``Row`` objects, and each Python worker
    keeps its producer between micro-batches; a task flushes before it ends, so the micro-batch commits only
    after every result is acknowledged.
    """
    produce = _produce_batches(conf, topic)

    def write(batch: DataFrame, _batch_id: int) -> None:
        results_json(batch).mapInArrow(produce, "sent long").collect()  # the only action: the plan runs once

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
