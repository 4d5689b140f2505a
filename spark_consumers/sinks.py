"""Where final aggregates go: a Kafka results topic, Parquet files, or the console.

Kafka: one message per updated (window, key); the message key is ``"<window start ms>|<window end ms>|<key>"``
and the value is the JSON of the *full* aggregate (not a delta) with the micro-batch id (``batch_id``). A
replayed micro-batch (after a restart from the checkpoint) re-sends the same keys with the same values, so a
reader that keeps the last value per message key -- or the compacted results topic -- never double-counts.
Written with confluent-kafka from each task of the sink stage (``foreachBatch`` -> ``mapInArrow``), so the
Python source needs no Kafka jar at all.

Never back in time: a sink task waits for every delivery report for longer than librdkafka's delivery timeout
(``message.timeout.ms``, 30 s unless the producer settings say otherwise), so when it gives up no message of
its own can still be retried. It then purges the pooled producer and drops it: nothing of a failed attempt
stays queued to land after the retry's newer values. ``batch_id`` lets a reader order values explicitly.

Stopping mid-batch: Spark tells a stop from a failure by matching the text of the error ``foreachBatch`` raised
against a regular expression that recurses once per character; on a Java stack trace (a few KB) it overflows
the stream thread's stack. So an interrupted action is re-raised as one line that the expression still
recognises (:func:`interrupted_in_one_line`).

Parquet: Spark's file sink (exactly-once through its own commit log); output mode ``append`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from connectors.admin import TopicSpec
from schemas.settings import RouteSettings

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "attach_sink",
    "flush_wait_s",
    "interrupted_in_one_line",
    "producer_conf",
    "result_key",
    "results_json",
    "results_topic_spec",
]


def result_key(window_start_ms: int, window_end_ms: int, key: str) -> bytes:
    """The results-topic message key of one (window, key)."""
    return f"{window_start_ms}|{window_end_ms}|{key}".encode()


def results_json(df: DataFrame, batch_id: int | None = None) -> DataFrame:
    """``rk`` (message key) and ``rv`` (JSON value, with ``batch_id`` when given) columns; times in epoch ms."""
    start_ms = F.unix_millis(F.col("window_start"))
    end_ms = F.unix_millis(F.col("window_end"))
    others = [c for c in df.columns if c not in ("window_start", "window_end")]
    return df.select(
        F.concat_ws("|", start_ms.cast("string"), end_ms.cast("string"), F.col("key")).alias("rk"),
        F.to_json(
            F.struct(
                start_ms.alias("window_start"),
                end_ms.alias("window_end"),
                *[F.col(c) for c in others],
                *([F.lit(batch_id).cast("long").alias("batch_id")] if batch_id is not None else []),
            )
        ).alias("rv"),
    )


#: One producer per configuration per Python worker process (Spark reuses Python workers across tasks), so a
#: sink task skips creating a client, connecting and, with idempotence, fetching a producer id.
_PRODUCERS: dict[tuple[tuple[str, str], ...], Any] = {}
#: librdkafka's delivery timeout for results unless the producer settings set one (its own default is 300 s).
DELIVERY_TIMEOUT_MS = 30_000
#: How much longer than the delivery timeout a task waits for the last delivery reports.
FLUSH_MARGIN_S = 10.0


def producer_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """The results producer's librdkafka settings: ours < ``conf``; one delivery timeout, however it is named."""
    full = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", **conf}
    timeout = full.pop("delivery.timeout.ms", None)  # librdkafka's alias of message.timeout.ms
    full.setdefault("message.timeout.ms", timeout if timeout is not None else DELIVERY_TIMEOUT_MS)
    return full


def flush_wait_s(conf: dict[str, Any]) -> float:
    """How long a sink task waits for delivery reports: the delivery timeout plus a margin."""
    return int(producer_conf(conf)["message.timeout.ms"]) / 1000 + FLUSH_MARGIN_S


def _key(full: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in full.items()))


def _pooled_producer(conf: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    full = producer_conf(conf)
    producer = _PRODUCERS.get(_key(full))
    if producer is None:
        producer = _PRODUCERS[_key(full)] = Producer(full)
    return producer


def _discard_producer(conf: dict[str, Any]) -> None:
    """Purge everything queued or in flight and forget the pooled producer (a failed attempt's leftovers)."""
    producer = _PRODUCERS.pop(_key(producer_conf(conf)), None)
    if producer is not None:
        producer.purge(in_queue=True, in_flight=True)
        producer.flush(0)  # serve the purged messages' delivery reports


def _produce_batches(conf: dict[str, Any], topic: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Any]]:
    """A ``mapInArrow`` function: produce every ``(rk, rv)`` row, flush, yield one row with the count."""
    wait = flush_wait_s(conf)

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        from schemas.exceptions import BrokerError

        producer = _pooled_producer(conf)
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        sent = 0
        try:
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
            remaining = producer.flush(wait)
            if remaining or errors:
                raise BrokerError(f"results topic {topic!r}: {remaining} undelivered, errors: {errors[:3]}")
        except BaseException:
            _discard_producer(conf)
            raise
        yield pa.RecordBatch.from_pydict({"sent": [sent]}, schema=pa.schema([("sent", pa.int64())]))

    return produce


#: The Java exceptions by which Spark recognises an action interrupted because the query is stopping.
INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


class ActionInterrupted(RuntimeError):
    """A ``foreachBatch`` action interrupted by the query's stop, in one line Spark recognises as a stop."""


def interrupted_in_one_line(exc: BaseException) -> ActionInterrupted | None:
    """``exc`` (a ``Py4JJavaError``) as one line if its Java exception is an interruption, else ``None``.

    Spark's test (``StreamExecution.PROXY_ERROR``) wants the Py4J error's heading, then the Java class name;
    nothing of the stack trace is needed, and its length is what overflows the test.
    """
    java = getattr(exc, "java_exception", None)
    try:
        name = str(java.getClass().getName()) if java is not None else ""
    except Exception:  # the JVM is going away: keep the original error
        return None
    if name not in INTERRUPTIONS:
        return None
    return ActionInterrupted(f"py4j.protocol.Py4JJavaError: An error occurred while calling an action: {name}")


def kafka_batch_writer(conf: dict[str, Any], topic: str) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing a micro-batch's updated aggregates to ``topic``.

    The rows reach Python as Arrow batches (``mapInArrow``), not pickled ``Row`` objects, and each Python worker
    keeps its producer between micro-batches; a task flushes before it ends, so the micro-batch commits only
    after every result is acknowledged.
    """
    produce = _produce_batches(conf, topic)

    def write(batch: DataFrame, batch_id: int) -> None:
        from py4j.protocol import Py4JJavaError

        try:
            results_json(batch, batch_id).mapInArrow(produce, "sent long").collect()  # the only action: runs once
        except Py4JJavaError as exc:
            short = interrupted_in_one_line(exc)
            if short is None:
                raise
            raise short from None

    return write


def results_topic_spec(topic: str, route: RouteSettings) -> TopicSpec:
    """The results topic: one partition per combiner, compacted (the last value per (window, key) is kept)."""
    return TopicSpec(topic, route.combiners, route.replication_factor, config=(("cleanup.policy", "compact"),))


def attach_sink(
    writer: DataStreamWriter,
    sink: str,
    *,
    kafka_conf: dict[str, Any] | None = None,
    results_topic: str | None = None,
    output_path: str | None = None,
) -> DataStreamWriter:
    """Configure ``writer`` for ``sink`` (``kafka``, ``parquet``, ``console``, or ``noop`` for benchmarks)."""
    if sink == "kafka":
        if kafka_conf is None or results_topic is None:
            raise ValueError("the kafka sink needs kafka_conf and results_topic")
        return writer.foreachBatch(kafka_batch_writer(kafka_conf, results_topic))
    if sink == "parquet":
        if output_path is None:
            raise ValueError("the parquet sink needs output_path")
        return writer.format("parquet").option("path", output_path)
    if sink == "console":
        return writer.format("console").option("truncate", "false").option("numRows", 50)
    if sink == "noop":
        return writer.format("noop")
    raise ValueError(f"unknown sink {sink!r}; valid: kafka, parquet, console, noop")
