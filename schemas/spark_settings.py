"""Settings of the Spark consumer job (the ``spark:`` section of a config), and URI joining for its locations."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import Field, model_validator

from schemas.model import FrozenModel

__all__ = ["AGGREGATION_PROFILES", "Aggregation", "AggregationProfile", "SparkSettings", "interval_ms", "join_uri"]

Aggregation = Literal["count", "sum", "min", "max", "mean", "approx_distinct", "top_k", "percentiles", "score"]
AggregationProfile = Literal["light", "heavy"]
_DEFAULT_AGGREGATIONS: tuple[Aggregation, ...] = ("count", "sum", "min", "max", "mean")
#: The aggregates of each ``spark.profile``. light: cheap decomposable aggregates; heavy: adds
#: high-accuracy percentiles and the per-record ``score`` computation (``score_rounds`` sets its cost), so the
#: partial aggregation in the scan task is real work per record.
AGGREGATION_PROFILES: dict[str, tuple[Aggregation, ...]] = {
    "light": ("count", "sum", "min", "max", "mean", "approx_distinct"),
    "heavy": ("count", "sum", "min", "max", "mean", "approx_distinct", "percentiles", "score"),
}

#: Reader options skewroute sets from other settings (lower-cased name -> the setting to use instead).
_OWNED_READER_OPTIONS = {
    "subscribe": "the route (its combiner topic)",
    "subscribepattern": "the route (its combiner topic)",
    "assign": "the route (its combiner topic)",
    "startingoffsets": "spark.starting_offsets",
    "maxoffsetspertrigger": "spark.max_records_per_trigger",
    "maxrecordspertrigger": "spark.max_records_per_trigger",
    "failondataloss": "spark.fail_on_data_loss",
    "minpartitions": "spark.min_partitions",
    "decode": "spark.item_field",
    "kafka.isolation.level": "spark.isolation_level",
    "kafka.bootstrap.servers": "kafka.bootstrap_servers",
}


class SparkSettings(FrozenModel):
    """Spark consumer job settings."""

    master: str = Field("local[2]", description="Spark master URL (ignored under spark-submit)")
    source: Literal["python", "kafka"] = Field(
        "python", description="Kafka reader: skewroute's Python data source, or Spark's built-in format('kafka')"
    )
    trigger_interval: str = Field("5 seconds", description="processing-time trigger")
    max_records_per_trigger: int = Field(250_000, ge=1, description="records per micro-batch at most")
    starting_offsets: str = Field("earliest", description="earliest, latest, or a JSON offsets dict")
    watermark: str = Field("10 seconds", description="event-time watermark delay")
    window: str = Field("10 seconds", description="aggregation window length")
    slide: str | None = Field(None, description="aggregation slide (None = tumbling)")
    aggregations: list[Aggregation] = Field(
        default_factory=lambda: list(_DEFAULT_AGGREGATIONS),
        description="aggregates per key and window (or set spark.profile instead)",
    )
    profile: AggregationProfile | None = Field(
        None,
        description="a named set of aggregates, used instead of spark.aggregations: light = count, sum, min, max, "
        "mean, approx_distinct; heavy = light + percentiles + score",
    )
    percentiles: list[Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=lambda: [0.5, 0.99], min_length=1, description="fractions of the percentiles aggregate"
    )
    percentile_accuracy: int = Field(
        10_000, ge=1, le=1_000_000, description="percentile_approx accuracy: rank error <= values / accuracy"
    )
    score_rounds: int = Field(
        1_000, ge=1, le=1_000_000, description="cost of the per-record score computation (multiply-adds per record)"
    )
    output_mode: Literal["update", "append"] = Field("update", description="Structured Streaming output mode")
    sink: Literal["kafka", "parquet", "console"] = Field("kafka", description="where final aggregates go")
    results_topic: str | None = Field(None, description="results topic (default: <raw_topic>.results)")
    output_path: str = Field(
        ".skewroute/results",
        min_length=1,
        description="Parquet output root, one folder per route: a path or a URI (file://, s3a://, hdfs://), "
        "passed to Spark untouched",
    )
    checkpoint_dir: str = Field(
        ".skewroute/checkpoints",
        min_length=1,
        description="checkpoint root, one folder per route: a path or a URI (file://, s3a://, hdfs://), passed to "
        "Spark untouched; on a cluster, storage every executor and a restarted driver can reach",
    )
    progress_log: Path = Field(Path(".skewroute/progress.jsonl"), description="per-batch observability log")
    shuffle_partitions: int = Field(8, ge=1, le=4096, description="reducers m = spark.sql.shuffle.partitions")
    dedupe: bool | Literal["auto"] = Field(
        "auto",
        description="drop replayed routed records on their source position (tp, p, o) within the watermark, so a "
        "crashed at-least-once router's replays are not counted twice (costs the pre-aggregation: records, not "
        "partials, are shuffled); auto: on unless router.delivery is exactly_once",
    )
    isolation_level: Literal["read_committed", "read_uncommitted", "auto"] = Field(
        "read_committed",
        description="reading transactional combiner topics; read_uncommitted (with dedupe) on Tansu, which never "
        "aborts a killed exactly_once worker's open transaction; auto: detect the broker (read_committed on "
        "Apache Kafka, read_uncommitted on Tansu)",
    )
    item_field: str | None = Field(
        None, description="dotted JSON path in the raw record for approx_distinct/top_k (default: the measure)"
    )
    top_k: int = Field(5, ge=1, le=1000, description="k of the top_k aggregate")
    approx_rsd: float = Field(0.05, gt=0, lt=0.4, description="relative standard deviation of approx_distinct")
    kafka_package: str | None = Field(
        None,
        description="Maven coordinate of spark-sql-kafka for source=kafka (default: the newest published, 4.2.0)",
    )
    conf: dict[str, str] = Field(default_factory=dict, description="extra Spark configuration (spark.* keys)")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve the per-batch combiner metrics for Prometheus on this port"
    )
    fail_on_data_loss: bool = Field(
        True,
        description="failOnDataLoss: fail when checkpointed offsets are gone (topic recreated, truncated, aged out); "
        "false skips them with a warning",
    )
    min_partitions: int | None = Field(
        None, ge=1, le=65536, description="minPartitions: cut large combiner partitions into offset ranges"
    )
    source_options: dict[str, str] = Field(
        default_factory=dict,
        description="extra options of the Kafka reader, passed to the chosen source as given: kafka.<property> in "
        "that source's client (librdkafka names for source=python, Java names for source=kafka, e.g. "
        "kafka.fetch.max.wait.ms) or a reader option; the options skewroute sets from other settings are refused",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_aggregates(cls, data: Any) -> Any:
        """``profile`` fills in ``aggregations`` unless they are given too (``_consistent`` then refuses a clash).

        Refusing here would hide every field error of the same document: pydantic stops at a raising
        ``before`` validator, so the clash is checked after the fields are.
        """
        if not isinstance(data, dict) or data.get("profile") not in AGGREGATION_PROFILES:
            return data  # no profile, or the field's own check names the value and the valid profiles
        if data.get("aggregations") is not None:
            return data
        return {**data, "aggregations": list(AGGREGATION_PROFILES[data["profile"]])}

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.profile is not None and tuple(self.aggregations) != AGGREGATION_PROFILES[self.profile]:
            raise ValueError(
                f"profile={self.profile!r} and aggregations={list(self.aggregations)!r} are both set: the profile "
                "names the aggregates, so set one of them"
            )
        for key in self.source_options:
            if key.lower() in _OWNED_READER_OPTIONS:
                raise ValueError(
                    f"source_options[{key!r}] is set by skewroute from {_OWNED_READER_OPTIONS[key.lower()]}: "
                    "set that instead"
                )
        if self.sink == "parquet" and self.output_mode != "append":
            raise ValueError(
                f"sink=parquet needs output_mode=append (got output_mode={self.output_mode!r}): the file sink "
                "writes each window once, when the watermark closes it"
            )
        if not self.master.startswith("local") and _is_relative_local(self.checkpoint_dir):
            raise ValueError(
                f"checkpoint_dir={self.checkpoint_dir!r} is a relative local path but master={self.master!r} is "
                "not local: executors and a restarted driver resolve it on their own machines and working "
                "folders; give an absolute path on shared storage or a URI (hdfs://, s3a://, file:///shared/...)"
            )
        return self


#: Milliseconds per unit of a Spark interval string (``interval_ms``), by the unit's name without a plural ``s``.
_UNIT_MS = {
    "ms": 1, "millisecond": 1, "s": 1_000, "sec": 1_000, "second": 1_000, "m": 60_000, "min": 60_000,
    "minute": 60_000, "h": 3_600_000, "hour": 3_600_000, "d": 86_400_000, "day": 86_400_000,
    "week": 604_800_000,
}  # fmt: skip
_INTERVAL_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*")


def interval_ms(text: str) -> int | None:
    """Milliseconds of a Spark interval such as ``10 seconds`` or ``1 minute 30 seconds``; ``None`` if not understood.

    Covers the ``<number> <unit>`` forms these settings are written in (an optional leading ``interval``); other
    forms Spark accepts (``INTERVAL '10' SECOND``) give ``None``, and the caller does without the figure.
    """
    rest = text.strip().lower().removeprefix("interval")
    total, pos = 0.0, 0
    while pos < len(rest):
        m = _INTERVAL_PART.match(rest, pos)
        unit = None if m is None else _UNIT_MS.get(m.group(2)) or _UNIT_MS.get(m.group(2).removesuffix("s"))
        if m is None or unit is None:
            return None
        total, pos = total + float(m.group(1)) * unit, m.end()
    return round(total) if pos else None


def join_uri(root: str, name: str) -> str:
    """``root/name`` for a path or a URI, without touching the scheme (``s3a://b/ck`` + ``r`` = ``s3a://b/ck/r``)."""
    return f"{root.rstrip('/')}/{name}" if root.rstrip("/") else f"/{name}"


def _is_relative_local(location: str) -> bool:
    """A plain path (no ``scheme://``/``scheme:/``) that is not absolute."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", location) is None and not location.startswith("/")
