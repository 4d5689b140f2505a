"""``skewroute-kafka``: a PySpark Python Data Source reading Kafka with confluent-kafka.

Same columns as Spark's built-in ``format("kafka")`` source (``key``, ``value``, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``), so the job's downstream code is identical for both. One Spark
input partition per Kafka partition, in partition order: task ``i`` of a micro-batch reads combiner ``i`` of a
combiner topic, and Spark's partial aggregation inside that task is the combiner stage.

Options (strings, as Spark passes them)::

    subscribe              topic[,topic...]                       (required)
    kafka.<property>       any librdkafka property: kafka.bootstrap.servers, kafka.security.protocol,
                           kafka.sasl.mechanism, kafka.sasl.username, kafka.sasl.password, kafka.ssl.* ...
    startingOffsets        earliest (default) | latest | {"topic": {"0": 42, "1": -2}}  (-2 earliest, -1 latest)
    maxOffsetsPerTrigger   records per micro-batch at most, shared in proportion to each partition's real lag
                           (alias: maxRecordsPerTrigger) -- see connectors.offset_ranges
    minPartitions          at least this many tasks: large partitions are cut into offset ranges (Spark's
                           semantics; then task i is no longer combiner i)
    failOnDataLoss         true (default): fail when checkpointed offsets are gone (DataLossError names topic,
                           partition, expected and available offsets) | false: warn and skip (Spark's semantics)
    includeHeaders         false (default) | true: Spark's ``headers`` column (decode=none only)
    probeTimeoutMs         how long a tail probe waits for partition EOF (default 5000)
    readTimeoutMs          how long a task waits for records it knows exist (default 60000)
    decode                 none (default: the Kafka columns above) | routed: values are routed records, decoded
                           here into parse_routed's columns (key, event_time, measure, combiner, src_topic,
                           src_partition, src_offset) by Arrow's JSON reader -- see connectors.routed_decode

Offsets are ``{topic: {partition: next offset}}``. ``latestOffset`` finds true partition ends with
:func:`connectors.kafka_offsets.probe_ends` (Tansu's high watermark hides the tail of the last batch).
``read`` runs on executors: it takes a consumer (a new one, or the idle one a previous task of the same Python
worker left behind), reads ``[start, end)`` with ``assign()`` and yields Arrow record batches; readers hold no
client themselves, so they pickle. Secrets live only in the options
(Spark redacts ``*password*`` options in plans) and are never logged here; ``repr`` masks them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    StructType,
)

from connectors.kafka_offsets import (
    DRIVER_PROBE_CONF,
    EARLIEST,
    LATEST,
    is_tansu,
    make_probe_consumer,
    parse_starting_offsets,
    probe_ends,
    probe_partitions,
    topic_partitions,
    watermarks,
)
from connectors.kafka_read import kafka_schema, read_range, report_loss
from connectors.offset_ranges import OffsetRange, Offsets, distribute_budget, floor_at, split_ranges
from schemas.settings import KafkaSettings

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer
    from pyspark.sql import SparkSession

__all__ = ["SHORT_NAME", "KafkaDataSource", "kafka_options", "kafka_schema", "register_source", "routed_schema"]

SHORT_NAME = "skewroute-kafka"
_SECRET_WORDS = ("password", "secret", "token")
_DECODES = ("none", "routed")


def kafka_options(kafka: KafkaSettings, prefix: str = "kafka.") -> dict[str, str]:
    """``KafkaSettings`` as data-source options (``kafka.<librdkafka property>``), consumer extras included."""
    return {f"{prefix}{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in kafka.librdkafka().items()}


def routed_schema() -> StructType:
    """The columns under ``decode=routed``: :data:`connectors.routed_decode.ROUTED_ARROW_SCHEMA` in Spark types."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from connectors.routed_decode import ROUTED_ARROW_SCHEMA

    return from_arrow_schema(ROUTED_ARROW_SCHEMA)


def register_source(spark: SparkSession) -> None:
    """Register :class:`KafkaDataSource` under :data:`SHORT_NAME` (idempotent)."""
    spark.dataSource.register(KafkaDataSource)


@dataclass(frozen=True)
class _Config:
    """The parsed options (picklable; holds the librdkafka dict, so never printed whole)."""

    topics: tuple[str, ...]
    conf: tuple[tuple[str, str], ...]
    starting: str
    max_records: int | None
    probe_timeout: float
    read_timeout: float
    decode: str = "none"
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> _Config:
        opts = {k: v for k, v in options.items()}
        lower = {k.lower(): v for k, v in opts.items()}
        topics = tuple(t.strip() for t in lower.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ValueError(f"{SHORT_NAME}: option 'subscribe' (topic[,topic...]) is required")
        conf = tuple(sorted((k[6:], v) for k, v in opts.items() if k.lower().startswith("kafka.")))
        if not any(k == "bootstrap.servers" for k, _ in conf):
            raise ValueError(f"{SHORT_NAME}: option 'kafka.bootstrap.servers' is required")
        limit = lower.get("maxrecordspertrigger") or lower.get("maxoffsetspertrigger")
        decode = lower.get("decode", "none").strip().lower()
        if decode not in _DECODES:
            raise ValueError(f"{SHORT_NAME}: option 'decode' must be one of {', '.join(_DECODES)} (got {decode!r})")
        min_parts = lower.get("minpartitions")
        if min_parts is not None and (not min_parts.strip().isdigit() or int(min_parts) < 1):
            raise ValueError(f"{SHORT_NAME}: option 'minPartitions' must be a positive integer (got {min_parts!r})")
        flags = {
            name: _flag(lower, name, default) for name, default in (("failOnDataLoss", True), ("includeHeaders", False))
        }
        if flags["includeHeaders"] and decode == "routed":
            raise ValueError(f"{SHORT_NAME}: option 'includeHeaders' needs decode=none (got decode={decode!r})")
        return cls(
            topics=topics,
            conf=conf,
            starting=lower.get("startingoffsets", "earliest"),
            max_records=int(limit) if limit else None,
            probe_timeout=float(lower.get("probetimeoutms", "5000")) / 1000,
            read_timeout=float(lower.get("readtimeoutms", "60000")) / 1000,
            decode=decode,
            min_partitions=int(min_parts) if min_parts is not None else None,
            fail_on_data_loss=flags["failOnDataLoss"],
            include_headers=flags["includeHeaders"],
        )

    def consumer(self) -> Consumer:
        """A fresh assign-only consumer."""
        return make_probe_consumer(dict(self.conf))

    def __repr__(self) -> str:
        shown = {k: ("***" if any(w in k for w in _SECRET_WORDS) else v) for k, v in self.conf}
        return f"_Config(topics={self.topics}, conf={shown}, starting={self.starting!r}, max={self.max_records})"


def _flag(lower: Mapping[str, str], name: str, default: bool) -> bool:
    raw = lower.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ValueError(f"{SHORT_NAME}: option {name!r} must be true or false (got {raw!r})")
    return raw.strip().lower() == "true"


class KafkaPartition(InputPartition):
    """One Kafka partition's offset range ``[start, end)`` = one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int, generation: str = "") -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.generation = generation  # executors reuse pooled consumers of the same generation only


class KafkaDataSource(DataSource):
    """Kafka via confluent-kafka, one task per partition (see the module docstring for options)."""

    @classmethod
    def name(cls) -> str:
        """The short name for ``format(...)``."""
        return SHORT_NAME

    def schema(self) -> StructType:
        """Spark's Kafka columns, or the decoded routed-record columns under ``decode=routed``."""
        return routed_schema() if _Config.from_options(self.options).decode == "routed" else kafka_schema()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader."""
        return KafkaStreamReader(_Config.from_options(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader over ``startingOffsets`` .. the current true ends (``endingOffsets`` not supported)."""
        return KafkaBatchReader(_Config.from_options(self.options))


class _Reading:
    """Shared: resolve offsets on the driver, read ranges on executors."""

    def __init__(self, cfg: _Config) -> None:
        self.cfg = cfg
        self._client: Consumer | None = None
        self._generation = uuid.uuid4().hex[:12]  # per query run: a restarted query never reuses older clients
        self._tansu: bool | None = None  # the broker's kind, asked once (connectors.kafka_offsets.watermarks)

    def __getstate__(self) -> dict[str, Any]:
        # the driver's consumer never travels to executors
        return {"cfg": self.cfg, "_client": None, "_generation": self._generation, "_tansu": self._tansu}

    def _is_tansu(self) -> bool:
        if self._tansu is None:
            self._tansu = is_tansu(self._consumer())
        return self._tansu

    def _consumer(self) -> Consumer:
        if self._client is None:  # the driver's: it only probes (executors read with cfg.consumer())
            self._client = make_probe_consumer({**DRIVER_PROBE_CONF, **dict(self.cfg.conf)})
        return self._client

    def _resolve(self, spec: str) -> Offsets:
        """Starting offsets with EARLIEST/LATEST replaced by real positions (latest = the true end)."""
        c = self._consumer()
        counts = topic_partitions(c, list(self.cfg.topics))
        parsed = parse_starting_offsets(spec, list(self.cfg.topics))
        out: Offsets = {}
        for t, n in counts.items():
            given = {} if isinstance(parsed, str) else parsed.get(t, {})
            default = EARLIEST if parsed != "latest" else LATEST
            out[t] = {str(p): int(given.get(str(p), default)) for p in range(n)}
        tansu = self._is_tansu()
        lows = _lows(c, out, tansu)
        latest = {t: {p: lows[t][p] for p, o in ps.items() if o == LATEST} for t, ps in out.items()}
        ends = probe_ends(c, latest, timeout=self.cfg.probe_timeout, tansu=tansu) if any(latest.values()) else {}
        for t, ps in out.items():
            for p, o in ps.items():
                if o == EARLIEST:
                    ps[p] = lows[t][p]
                elif o == LATEST:
                    ps[p] = ends[t][p]
        return out

    def _ends(self, start: Offsets, settle: bool = False) -> tuple[Offsets, Offsets, Offsets]:
        """(starts, true ends, skipped) of every partition; data loss raised or reported (``failOnDataLoss``).

        ``settle``: a partition's end may be taken from the probe's first answer (a streaming micro-batch's plan;
        SETTLE in :mod:`connectors.kafka_offsets`); otherwise every partition is read to its EOF event.

        Uncapped: the budget is shared by real lag. New partitions start at their low watermark. ``skipped``:
        partitions whose end is below their checkpointed start (recreated/truncated) under failOnDataLoss=false;
        their end is planned there, so the next batch continues from the partition's new end (as Spark does).
        """
        counts = topic_partitions(self._consumer(), list(self.cfg.topics))
        fail = self.cfg.fail_on_data_loss
        for t, ps in start.items():
            for p, s in ps.items():
                if t in counts and int(p) >= counts[t]:
                    self._loss(t, int(p), s, -1, -1, f"the topic has {counts[t]} partitions now")
        full = {t: {str(p): start.get(t, {}).get(str(p), -1) for p in range(n)} for t, n in counts.items()}
        probe = probe_partitions(
            self._consumer(), full, timeout=self.cfg.probe_timeout, tansu=self._is_tansu(), settle=settle
        )
        skipped: Offsets = {}
        for t, ps in full.items():
            for p, s in ps.items():
                lo, end = probe.lows[t][p], probe.ends[t][p]
                if s < 0:  # a partition the checkpoint does not know: from its beginning
                    ps[p] = lo
                elif (t, p) in probe.exact and end < s:
                    self._loss(t, int(p), s, lo, end, "the partition ends before it: topic recreated or truncated")
                    skipped.setdefault(t, {})[p] = end
                elif lo > s:
                    self._loss(t, int(p), s, lo, end, "records removed: retention, truncation or a recreated topic")
                    if not fail:
                        ps[p] = lo
        ends = {t: {p: max(e, full[t][p]) for p, e in ps.items()} for t, ps in probe.ends.items()}
        return full, ends, skipped

    def _new_generation(self) -> None:
        """Clients that saw a topic before it was recreated must not be reused (librdkafka can crash on it)."""
        self._generation = uuid.uuid4().hex[:12]
        self._close()

    def _loss(self, topic: str, partition: int, expected: int, low: int, high: int, cause: str) -> None:
        # Runs in Spark's Python source runner (a process of its own): the warning reaches the driver's log; the
        # job's progress listener counts skipped partitions (end below start) as skewroute_spark_source_data_loss.
        report_loss(self.cfg.fail_on_data_loss, topic, partition, expected, low, high, cause)
        self._new_generation()

    def _partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        new = {t: [p for p in ps if p not in start.get(t, {})] for t, ps in end.items()}
        lows = _lows(self._consumer(), new, self._is_tansu()) if any(new.values()) else {}
        ranges = [
            OffsetRange(t, int(p), start[t][p] if p in start.get(t, {}) else lows[t][p], e)
            for t in sorted(end)
            for p, e in sorted(end[t].items(), key=lambda kv: int(kv[0]))
        ]
        if all(r.size == 0 for r in ranges):
            return []
        planned = split_ranges(ranges, self.cfg.min_partitions)
        return [KafkaPartition(r.topic, r.partition, r.start, r.end, self._generation) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Records ``[start, end)`` of one partition as Arrow batches (runs on an executor)."""
        assert isinstance(partition, KafkaPartition)
        if partition.start >= partition.end:
            return iter(())
        return read_range(self.cfg, partition)

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class KafkaStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets resolved and bounded on the driver, ranges read by tasks."""

    def __init__(self, cfg: _Config) -> None:
        super().__init__(cfg)
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_target": None, "_latest": None}

    def initialOffset(self) -> dict:
        """Where a new query starts (a restarted one resumes from its checkpoint instead)."""
        return self._resolve(self.cfg.starting)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` when set."""
        return ReadMaxRows(self.cfg.max_records) if self.cfg.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """True ends (probed), at most ``limit`` records past ``start`` shared by lag, capped by AvailableNow."""
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        # availableNow stops at the first plan that brings nothing new: its plans read every partition to the end
        full_start, ends, skipped = self._ends(start, settle=self._target is None)
        self._latest = ends
        if self._target is not None:
            ends = {t: {p: min(e, self._target.get(t, {}).get(p, e)) for p, e in ps.items()} for t, ps in ends.items()}
        planned = floor_at(distribute_budget(full_start, ends, budget), full_start)
        for t, ps in skipped.items():
            planned[t].update(ps)
        return planned

    def reportLatestOffset(self) -> dict | None:
        """The true ends found by the last ``latestOffset`` (progress shows them next to the batch's end)."""
        return self._latest

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: the true ends now (never planned below a batch's start, see ``latestOffset``)."""
        self._target = self._ends({})[1]

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One input partition per Kafka partition, in partition order (task index = combiner id)."""
        return self._partitions(start, end)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in Kafka."""

    def stop(self) -> None:
        """Close the driver-side consumer."""
        self._close()


class KafkaBatchReader(_Reading, DataSourceReader):
    """Batch reader: ``startingOffsets`` to the true ends now."""

    def partitions(self) -> Sequence[InputPartition]:
        """One input partition per Kafka partition."""
        start = self._resolve(self.cfg.starting)
        end = probe_ends(self._consumer(), start, timeout=self.cfg.probe_timeout, tansu=self._is_tansu())
        self._close()
        return self._partitions(start, end) or [KafkaPartition(self.cfg.topics[0], 0, 0, 0)]


def _lows(consumer: Consumer, parts: Mapping[str, Iterable[str]], tansu: bool) -> Offsets:
    """Where each partition's log starts (:func:`connectors.kafka_offsets.watermarks`)."""
    keys = [(t, p) for t, ps in parts.items() for p in ps]
    out: Offsets = {t: {} for t in parts}
    for (t, p), (low, _high) in zip(keys, watermarks(consumer, [_tp(t, p) for t, p in keys], tansu=tansu), strict=True):
        out[t][p] = low
    return out


def _tp(topic: str, partition: str | int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, int(partition))
