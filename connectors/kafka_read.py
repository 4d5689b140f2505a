"""The executor side of the ``skewroute-kafka`` data source: read one offset range as Arrow record batches.

A task reads exactly ``[start, end)`` of one partition with ``assign()``: records below ``start`` are never
emitted (a fetch can return earlier records of the same broker batch), reading stops at ``end``. Its consumer
has ``auto.offset.reset=error``, so an offset the broker no longer has is an error event here, never a silent
jump to the partition's beginning (which would replay offset 0 of a recreated topic as if it belonged to the
checkpointed range). Missing offsets are data loss: with ``failOnDataLoss`` (default) the task fails with
:class:`schemas.exceptions.DataLossError` naming topic, partition, expected and available offsets; without it
the task logs a warning and goes on from the first offset the broker still has.

Gaps *inside* the broker's range (transaction markers, aborted records under read_committed) are not loss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from schemas.exceptions import BrokerError, DataLossError

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer
    from pyspark.sql.types import StructType

__all__ = ["RangeSpec", "ReadConfig", "read_range"]

log = logging.getLogger("skewroute.spark_source")
_CONSUME_MAX = 10_000
#: How long one ``consume()`` waits. It asks for the rest of the range plus the partition-EOF event, and returns
#: early only when it holds that many messages. A range ending in transaction markers (offsets with no record:
#: every range a transactional router wrote up to the end) never does, so the task's last call waited all of
#: this: 0.2 s per task before (BENCHMARKS.md, "The offset probe").
_CONSUME_WAIT_S = 0.02
#: One idle consumer per configuration per Python worker process. Spark reuses Python workers across tasks
#: (``spark.python.worker.reuse``), so a task skips the connect + metadata round trips of a new client. Only
#: the consumer moves between tasks, never offsets: each task assigns its own range.
#: Keyed by configuration; a consumer is reused only by a task of the same generation (query run, and no data
#: loss seen since), because a librdkafka client that saw a topic before it was deleted and recreated can crash.
_POOL: dict[tuple[tuple[str, str], ...], tuple[str, Consumer]] = {}
_RETIRED: list[Consumer] = []
_TANSU: dict[tuple[tuple[str, str], ...], bool] = {}  # per connection settings: is the broker Tansu


class ReadConfig(Protocol):
    """What a task needs of the source's options."""

    @property
    def conf(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def read_timeout(self) -> float: ...
    @property
    def decode(self) -> str: ...
    @property
    def fail_on_data_loss(self) -> bool: ...
    @property
    def include_headers(self) -> bool: ...

    def consumer(self) -> Consumer: ...


class RangeSpec(Protocol):
    """One task's range."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def generation(self) -> str: ...


def report_loss(fail: bool, topic: str, partition: int, expected: int, low: int, high: int, cause: str) -> None:
    """Raise :class:`DataLossError` (``fail``) or log it as a warning (skipping the missing offsets)."""
    err = DataLossError(topic, partition, expected, low, high, cause)
    if fail:
        raise err
    log.warning("skipping: %s", err)


def _arrow_batch(msgs: list[Any], offsets: list[int], part: RangeSpec, headers: bool) -> pa.RecordBatch:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(kafka_schema(headers), timezone="UTC")
    n = len(msgs)
    stamps = [m.timestamp() for m in msgs]
    cols = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(part.topic, pa.string()), n),
        pa.repeat(pa.scalar(part.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array([s[1] * 1000 for s in stamps], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([s[0] - 1 if s[0] > 0 else -1 for s in stamps], pa.int32()),  # librdkafka 1/2 = Kafka 0/1
    ]
    if headers:
        hs = [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in msgs]
        cols.append(pa.array(hs, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _tansu(cfg: ReadConfig, consumer: Consumer) -> bool:
    """Whether the broker of ``cfg`` is Tansu: asked once per executor process, not once per range."""
    from connectors.kafka_offsets import is_tansu

    known = _TANSU.get(cfg.conf)
    if known is None:
        known = _TANSU[cfg.conf] = is_tansu(consumer)
    return known


def _pooled(cfg: ReadConfig, generation: str) -> Consumer:
    pooled = _POOL.pop(cfg.conf, None)
    if pooled is not None:
        if pooled[0] == generation:
            return pooled[1]
        _RETIRED.append(pooled[1])  # idle (unassigned) and kept: destroying it may touch the recreated topic
    return cfg.consumer()


def read_range(cfg: ReadConfig, part: RangeSpec) -> Iterator[pa.RecordBatch]:
    """Consume ``[start, end)`` of one partition; one Arrow batch per ``consume`` call (at most 10k records)."""
    from confluent_kafka import KafkaError, TopicPartition

    from connectors.kafka_offsets import watermarks
    from connectors.routed_decode import decode_routed

    lost_codes = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
    consumer = _pooled(cfg, part.generation)
    tp = TopicPartition(part.topic, part.partition)
    done = False
    try:
        ((low, high),) = watermarks(consumer, [tp], tansu=_tansu(cfg, consumer))
        next_offset = part.start
        if low > part.start:
            report_loss(cfg.fail_on_data_loss, part.topic, part.partition, part.start, low, high, "records removed")
            next_offset = low
        consumer.assign([TopicPartition(part.topic, part.partition, next_offset)])
        deadline = time.monotonic() + cfg.read_timeout
        while next_offset < part.end:
            msgs = consumer.consume(min(_CONSUME_MAX, part.end - next_offset + 1), timeout=_CONSUME_WAIT_S)
            if not msgs:
                if time.monotonic() > deadline:
                    raise BrokerError(
                        f"{part.topic}[{part.partition}]: offsets {next_offset}..{part.end} not readable "
                        f"within {cfg.read_timeout:.0f} s"
                    )
                continue
            deadline = time.monotonic() + cfg.read_timeout
            eof = False
            for m in msgs:
                err = m.error()
                if err is None:
                    continue
                if err.code() in lost_codes:
                    ((low, high),) = watermarks(consumer, [tp], tansu=_tansu(cfg, consumer))
                    report_loss(
                        cfg.fail_on_data_loss, part.topic, part.partition, next_offset, low, high, "offset out of range"
                    )
                    if low <= next_offset:  # the partition ends before the range: nothing more to read
                        return
                    next_offset = low
                    consumer.assign([TopicPartition(part.topic, part.partition, next_offset)])
                    break
                if err.code() != KafkaError._PARTITION_EOF:
                    raise BrokerError(f"reading {part.topic}[{part.partition}]: {err.str()}")
                if (m.offset() or 0) >= part.end:  # the range ends in offsets with no record (markers)
                    eof = True
            records = [m for m in msgs if m.error() is None]
            beyond = any((m.offset() or 0) >= part.end for m in records)
            # never emit what lies outside [start, end): a fetch may start inside an earlier broker batch
            msgs = [m for m in records if next_offset <= (m.offset() or 0) < part.end]
            offsets: list[int] = [m.offset() for m in msgs]  # type: ignore[misc]  # never None on records
            if offsets:
                next_offset = offsets[-1] + 1
            if eof or beyond:
                next_offset = part.end
            if not msgs:
                continue
            if cfg.decode == "routed":
                yield decode_routed([m.value() for m in msgs], part.partition, [m.key() for m in msgs], part.topic)
            else:
                yield _arrow_batch(msgs, offsets, part, cfg.include_headers)
        done = True
    finally:
        if done and cfg.conf not in _POOL:  # keep it for the next task of this (reused) Python worker
            consumer.unassign()
            _POOL[cfg.conf] = (part.generation, consumer)
        else:
            consumer.close()


def kafka_schema(headers: bool = False) -> StructType:
    """The columns of Spark's Kafka source (``headers`` last, as Spark's ``includeHeaders=true`` adds it)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    extra = [
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
            True,
        )
    ]
    return StructType(
        [
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("timestamp", TimestampType(), True),
            StructField("timestampType", IntegerType(), True),
        ]
        + (extra if headers else [])
    )
