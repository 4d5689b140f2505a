"""The configurations of ``skewroute e2e-bench`` and the settings each run uses.

Every configuration aggregates the same keyed raw topic with the same Spark job (tumbling event-time windows
per key, Kafka results sink, one shared ``local[2]`` session):

- ``direct``: the job reads the raw topic itself. Producers key their records, so the raw topic is
  hash-partitioned (librdkafka ``murmur2_random``, the Java client's default) and each scan task -- where
  Spark's partial aggregation runs -- holds whatever its partition's keys weigh;
- ``direct-split``: the same with ``minPartitions``-style splitting of large raw partitions into several
  offset ranges (balanced scan tasks; a hot key is partially aggregated in several tasks);
- ``direct-repartition``: ``repartition(n)`` (round robin) of the raw records before the aggregation: every
  record crosses one extra shuffle, the partial aggregation runs after it on balanced tasks;
- ``hash``, ``dalton``, ``pkg``, ``cam``, ``fish``, ``prompt``: router workers route the raw topic into an
  ``n``-partition combiner topic with that partitioner, and the job reads the combiner topic.

Every configuration also exists with the suffix ``-jvm`` (``direct-jvm``, ``dalton-jvm``, ...): the same run with
Spark's built-in Kafka source (``spark.source: kafka``, ``format("kafka")``, the spark-sql-kafka connector from
``spark.jars.packages``) instead of skewroute's Python source, so both sources can be compared on the same
workload in the same run. They are not in the default list (each adds a full run); the shared session gets the
connector package only when one of them is asked for. The JVM source decodes the JSON values with Spark's
``from_json``. It stops at the broker's high watermark, so its runs need a broker with exact end offsets
(Apache Kafka: ``--broker kafka``); Tansu's is one producer batch short.

The raw records are ``{"k": key, "t": event ms, "x": measure}`` -- the field names of the routed wire
format -- so the direct job decodes them with the same Arrow JSON decoder (``decode=routed``) as the routed
job: the comparison does not charge the direct job for a slower parser.

The aggregates are a ``spark.profile`` (``--profile``): ``light`` (count, sum, min, max, mean, approx_distinct:
about 1-2 us per record of partial aggregation) or ``heavy`` (light + ``percentile_approx`` at accuracy
``percentile_accuracy`` + the per-record ``score`` computation of ``score_rounds`` multiply-adds), where the
scan task -- the task routing balances -- does real work per record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from schemas.settings import SkewrouteSettings
from schemas.spark_settings import AGGREGATION_PROFILES

__all__ = ["DIRECT", "JVM", "JVM_SUFFIX", "ROUTED", "E2EOptions", "RunSpec", "base_config", "config_doc",
           "session_config"]  # fmt: skip

DIRECT = ("direct", "direct-split", "direct-repartition")
ROUTED = ("hash", "dalton", "pkg", "cam", "fish", "prompt")
JVM_SUFFIX = "-jvm"
#: Every configuration read with Spark's JVM Kafka source instead of the Python source (not run by default).
JVM = tuple(c + JVM_SUFFIX for c in DIRECT + ROUTED)


def base_config(config: str) -> str:
    """The configuration without its source suffix (``dalton-jvm`` -> ``dalton``)."""
    return config.removesuffix(JVM_SUFFIX)


def session_config(configs: tuple[str, ...]) -> str:
    """The configuration the shared session is built from: a JVM one when any run needs the connector package."""
    return "direct" + JVM_SUFFIX if any(c.endswith(JVM_SUFFIX) for c in configs) else "direct"


@dataclass(frozen=True)
class E2EOptions:
    """The benchmark's knobs (the CLI options)."""

    workload: str = "zipf:s=1.5,keys=10000"
    records: int = 400_000  # backlog phase
    batch: int = 100_000  # records per micro-batch at most (backlog phase)
    combiners: tuple[int, ...] = (8, 2)  # one setup per n; Spark always local[2]
    configs: tuple[str, ...] = DIRECT + ROUTED
    routers: int = 2
    reducers: int = 2
    rate_fraction: float = 0.9  # latency phase: this fraction of the direct job's measured drain rate
    rate: float | None = None  # latency phase: a fixed rate instead
    rate_seconds: float = 30.0
    trigger_s: float = 1.0
    window_s: int = 10
    watermark_s: int = 120  # generous: no record is late, so every configuration must be exact
    profile: str = "light"  # spark.profile: light or heavy
    score_rounds: int = 1_000  # heavy: multiply-adds per record of the score computation
    percentile_accuracy: int = 10_000  # heavy: percentile_approx accuracy
    slots: int = 2  # Spark task slots: local[slots]
    rate_combiners: tuple[int, ...] | None = None  # the n that get a rate phase (None: every n)
    model_check: bool = True  # drain direct, direct-split and Dalton again on local[1] to check the model
    split_factor: int = 4  # direct-split: minPartitions = split_factor * raw partitions
    seed: int = 1
    bootstrap: str | None = None
    kafka_package: str | None = None  # spark-sql-kafka for the -jvm configurations (default: the job's)
    out: Path = Path("reports/e2e")
    warmup: int = 50_000  # records of each unreported warm-up pass (0: none)
    warm_passes: int = 4  # warm-up passes at most: until two consecutive ones drain at rates within warm_tolerance
    warm_tolerance: float = 0.15
    recheck: bool = True  # measure direct's backlog again after the other configurations (drift control)
    rounds: int = 1  # backlog drains of every configuration, the order reversed every other round (rounds.py)
    timeout_s: float = 600.0

    @property
    def aggregations(self) -> list[str]:
        """The job's aggregates (those of :attr:`profile`)."""
        return list(AGGREGATION_PROFILES[self.profile])

    def rate_phase(self, n: int) -> bool:
        """Whether ``n`` gets a rate (latency) phase."""
        return self.rate_combiners is None or n in self.rate_combiners


@dataclass(frozen=True)
class RunSpec:
    """One configuration in one phase: its topics, folder and settings file."""

    config: str
    n: int
    phase: str  # "backlog" or "rate"
    prefix: str
    folder: Path
    bootstrap: str
    opts: E2EOptions
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def routed(self) -> bool:
        """Whether router workers feed the job."""
        return base_config(self.config) not in DIRECT

    @property
    def jvm(self) -> bool:
        """Whether the job reads with Spark's JVM Kafka source (``spark.source: kafka``)."""
        return self.config.endswith(JVM_SUFFIX)

    @property
    def tag(self) -> str:
        """Topic-safe name of the run."""
        return f"{self.prefix}-n{self.n}-{self.phase}-{self.config}"

    @property
    def raw_topic(self) -> str:
        """The keyed raw topic (``n`` partitions)."""
        return f"{self.tag}.raw"

    @property
    def read_topic(self) -> str:
        """What the Spark job reads: the combiner topic, or the raw topic for the direct configurations."""
        return f"{self.tag}.combiners" if self.routed else self.raw_topic

    @property
    def results_topic(self) -> str:
        """Where the job writes its aggregates."""
        return f"{self.tag}.results"

    @property
    def config_file(self) -> Path:
        """The YAML settings the router workers are started on."""
        return self.folder / "config.yaml"

    def settings(self) -> SkewrouteSettings:
        """Write the settings file and load it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(yaml.safe_dump(config_doc(self), sort_keys=False), encoding="utf-8")
        return SkewrouteSettings.load(self.config_file)


def _dalton(routers: int) -> dict[str, Any]:
    return {"raw_keys": "partitioned", **({"routers": routers} if routers > 1 else {})}


def config_doc(spec: RunSpec) -> dict[str, Any]:
    """The settings document of ``spec`` (route, router and Spark job)."""
    o = spec.opts
    part = base_config(spec.config) if spec.routed else "hash"
    return {
        "kafka": {"bootstrap_servers": spec.bootstrap},
        "routes": [
            {
                "raw_topic": spec.raw_topic,
                "name": spec.tag,
                "combiner_topic": spec.read_topic,
                "combiners": spec.n,
                "key": {"source": "field", "field": "k"},
                "time": {"source": "field", "field": "t", "unit": "ms"},
                "value_field": "x",
                # the shipped rule: the route's slide is the Spark trigger
                "window": {"kind": "time", "size": 60_000, "slide": round(o.trigger_s * 1000)},
                # Dalton's routers share one placement rule from the first tuple when told how many read the keys;
                # the raw topic is partitioned by the routing key (KeyedProducer), so each router sees its own keys
                "partitioner": {"name": part, **(_dalton(o.routers) if part == "dalton" else {})},
                "seed": o.seed,
            }
        ],
        "router": {
            "app_id": spec.tag,
            "control_topic": f"{spec.tag}.control",
            "state_dir": str(spec.folder / "router-state"),
            "log_format": "text",
            "log_level": "WARNING",
        },
        "spark": {
            "master": f"local[{o.slots}]",
            "source": "kafka" if spec.jvm else "python",
            "kafka_package": o.kafka_package,
            "trigger_interval": f"{o.trigger_s:g} seconds",
            "max_records_per_trigger": o.batch,
            "window": f"{o.window_s} seconds",
            "watermark": f"{o.watermark_s} seconds",
            "profile": o.profile,
            "dedupe": False,  # no worker is killed here: what routing buys, without the crash insurance's cost
            "score_rounds": o.score_rounds,
            "percentile_accuracy": o.percentile_accuracy,
            "sink": "kafka",
            "results_topic": spec.results_topic,
            "shuffle_partitions": o.reducers,
            "checkpoint_dir": str(spec.folder / "checkpoints"),
            "progress_log": str(spec.folder / "progress.jsonl"),
            "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
        },
    }
