"""Spark consumer benchmark: end-to-end records/s and per-batch combiner stragglers per routing algorithm.

For each partitioner: route a seeded Zipf stream with ``router.partitioners.create`` (no router process),
produce it as routed records to a fresh ``n``-partition combiner topic, then run the real job (windowed
aggregation, Kafka results sink by default) with ``availableNow`` and micro-batches of ``--batch`` records,
once per Spark source (``--sources``): ``python`` (skewroute's source, the default) and/or ``kafka`` (Spark's
built-in JVM connector from ``spark.jars.packages``, default :data:`spark_consumers.job.DEFAULT_KAFKA_PACKAGE`;
the shared session gets the package only when a ``kafka`` row is asked for). Both sources read the same topic,
one after the other, each from the beginning with its own checkpoint. The JVM source stops at the broker's
high watermark, which Tansu reports one producer batch short (on a freshly produced topic nearly all of it: the
JVM row read 4 of 4,000 records on Tansu in a check): its rows need ``--broker kafka`` (Apache Kafka) to read
every record, and a row that read fewer records than were produced is reported as an error.
Reported per algorithm and source: steady-state records/s (every batch but the first, which pays for warm-up),
and per batch the straggler ratio (max/median combiner task time) and shuffled partials.

    skewroute spark-bench --records 1000000 --batch 250000 -p hash,pkg,cam,dalton
    skewroute spark-bench --broker kafka --sources python,kafka -p hash,dalton
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.spark.feed import assign_combiners, produce_routed
from benchmarks.workloads import make_workload
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings, SkewrouteSettings, SparkSettings
from spark_consumers.observability import BatchStats
from spark_consumers.session import DEFAULT_KAFKA_PACKAGE

__all__ = ["SOURCES", "BenchResult", "main", "parse_sources", "render_markdown", "run_bench", "session_spark"]

BASE_MS = 1_700_000_000_000
#: The Spark sources a row can read with (``spark.source``).
SOURCES = ("python", "kafka")


@dataclass
class BenchResult:
    """One algorithm's run."""

    partitioner: str
    records: int
    source: str = "python"
    produce_s: float = 0.0
    batches: list[BatchStats] = field(default_factory=list)
    error: str | None = None

    @property
    def read(self) -> int:
        """Records the job read (over every batch)."""
        return sum(b.input_rows for b in self.batches)

    @property
    def steady(self) -> list[BatchStats]:
        """Data batches after the first (warm-up)."""
        data = [b for b in self.batches if b.input_rows > 0]
        return data[1:] if len(data) > 1 else data

    @property
    def steady_rate(self) -> float | None:
        """Records per second over the steady batches."""
        st = self.steady
        ms = sum(b.batch_ms for b in st)
        return sum(b.input_rows for b in st) / (ms / 1000) if ms else None

    @property
    def overall_rate(self) -> float | None:
        """Records per second over all data batches (warm-up included)."""
        data = [b for b in self.batches if b.input_rows > 0]
        ms = sum(b.batch_ms for b in data)
        return sum(b.input_rows for b in data) / (ms / 1000) if ms else None

    def straggler(self) -> list[float]:
        """Straggler ratio of every data batch."""
        return [b.straggler_ratio for b in self.batches if b.input_rows and b.straggler_ratio is not None]

    def record_ratio(self) -> list[float]:
        """Max/median records per combiner task of every data batch."""
        return [b.record_ratio for b in self.batches if b.input_rows and b.record_ratio is not None]

    def partials(self) -> list[int]:
        """Shuffled partials of every data batch."""
        return [b.shuffled_partials for b in self.batches if b.input_rows]


def parse_sources(text: str) -> tuple[str, ...]:
    """``python,kafka`` -> ``("python", "kafka")``; an unknown or missing source is an error naming the value."""
    out = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    bad = [x for x in out if x not in SOURCES]
    if bad or not out:
        raise ValueError(f"sources must be a comma-separated subset of {', '.join(SOURCES)}, got {text!r}")
    return out


def session_spark(settings: SparkSettings, sources: tuple[str, ...], package: str | None) -> SparkSettings:
    """The settings the shared session is built from.

    ``source: kafka`` (so ``spark.jars.packages`` is set at launch) only when a JVM row is asked for; the Python
    source runs on that session as well.
    """
    if "kafka" not in sources:
        return settings
    return settings.model_copy(update={"source": "kafka", "kafka_package": package or settings.kafka_package})


def _stream(tuples: int, keys: int, s: float, seed: int) -> tuple[list[str], list[int], list[float]]:
    wl = make_workload(f"zipf:s={s},keys={keys},tuples={tuples},batch=100000,seed={seed}")
    ids = np.concatenate([k for k, _ in wl.batches()])
    rng = np.random.default_rng(seed)
    times = (BASE_MS + np.arange(len(ids), dtype=np.int64) * 1).tolist()  # 1000 records per second of event time
    return [f"k{int(i)}" for i in ids], times, rng.integers(0, 1000, len(ids)).astype(float).tolist()


def run_bench(
    kafka: KafkaSettings,
    partitioners: list[str],
    *,
    tuples: int = 1_000_000,
    batch: int = 250_000,
    n: int = 8,
    keys: int = 10_000,
    s: float = 1.5,
    seed: int = 1,
    sink: str = "kafka",
    reducers: int = 2,
    workdir: Path,
    log: bool = True,
    warmup: int = 250_000,
    sources: tuple[str, ...] = ("python",),
    package: str | None = None,
) -> list[BenchResult]:
    """Run every partitioner through the job on one SparkSession, once per source (see the module docstring)."""
    from spark_consumers.job import start_job
    from spark_consumers.session import build_session

    stream_keys, times, measures = _stream(tuples, keys, s, seed)
    out: list[BenchResult] = []
    spark = None
    # Warm-up: one unreported pass (shuffle-routed prefix of the stream) so the JVM's JIT, the Python workers and
    # their pooled Kafka clients are warm before the first measured algorithm, which would otherwise pay for it.
    runs = ([("warm-up", min(warmup, tuples))] if warmup > 0 else []) + [(p, tuples) for p in partitioners]
    for name, count in runs:
        results = [BenchResult(name, count, source=src) for src in sources]
        if name != "warm-up":
            out.extend(results)
        try:
            combiners = assign_combiners(stream_keys[:count], "shuffle" if name == "warm-up" else name, n, seed=seed)
        except Exception as exc:  # not implemented yet, or broken: report n/a
            for res in results:
                res.error = f"{type(exc).__name__}: {exc}"
            continue
        raw = f"bench-{name.replace('-', '')}-{os.getpid()}-{time.monotonic_ns()}"
        t0 = time.monotonic()
        for res in results:
            settings = SkewrouteSettings.load(
                kafka=kafka,
                routes=[{"raw_topic": raw, "combiners": n}],
                spark={
                    "source": res.source,
                    "dedupe": False,  # measures the pre-aggregation of routed records; no router crashes here
                    "kafka_package": package,
                    "max_records_per_trigger": batch,
                    "window": "10 seconds",
                    "watermark": "30 seconds",
                    "results_topic": f"{raw}.results-{res.source}",
                    "checkpoint_dir": str(workdir / "checkpoints" / res.source),
                    "progress_log": str(workdir / "progress.jsonl"),
                    "shuffle_partitions": reducers,
                    "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
                },
            )
            route = settings.routes[0]
            if res is results[0]:  # the topic is produced once; every source reads it from the beginning
                ensure_topics(make_admin(kafka), [TopicSpec(route.combiner_topic_name, n, exact=True)])
                produce_routed(kafka, route.combiner_topic_name, stream_keys[:count], times[:count],
                               measures[:count], combiners, raw_topic=raw)  # fmt: skip
                produce_s = time.monotonic() - t0
            res.produce_s = produce_s
            if spark is None:
                spark = build_session(session_spark(settings.spark, sources, package), "skewroute-spark-bench")
                spark.sparkContext.setLogLevel("ERROR")
            handle = start_job(spark, settings, available_now=True, sink=sink)
            handle.query.awaitTermination()
            time.sleep(1.0)
            handle.stop()
            res.batches = handle.stats
            if handle.query.exception() is not None:
                res.error = str(handle.query.exception())[:200]
            elif res.read != count:  # e.g. the JVM source on Tansu, whose high watermark is one batch short
                res.error = f"read {res.read:,} of {count:,} records"
            if log:
                print(f"{name}/{res.source}: {_fmt(res.steady_rate)} rec/s steady, read {res.read:,}/{count:,}, "
                      f"straggler {res.straggler()}", file=sys.stderr)  # fmt: skip
    return out


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, spec)


def render_markdown(results: list[BenchResult], params: dict[str, object]) -> str:
    """The report: a summary table per algorithm and source, and the per-batch figures."""
    lines = [
        "# Spark consumer benchmark",
        "",
        "Parameters: " + ", ".join(f"{k}={v}" for k, v in params.items()),
        "",
        "Source `python`: skewroute's source (confluent-kafka, decoded with Arrow); `kafka`: Spark's built-in JVM "
        "connector (spark-sql-kafka, decoded with from_json). Both read the same topic per algorithm.",
        "",
        "| routing | source | records read | steady rec/s | all-batch rec/s | straggler ratio per batch (max/median "
        "task time) | median straggler | max/median task records | shuffled partials per batch | partials vs hash |",
        "| --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- |",
    ]
    hash_partials = {
        r.source: sum(r.partials()) for r in results if r.partitioner == "hash" and r.partials() and not r.error
    }
    for r in results:
        if r.error and not r.batches:
            lines.append(f"| {r.partitioner} | {r.source} | n/a | n/a | n/a | n/a ({r.error[:60]}) | n/a | n/a | n/a "
                         "| n/a |")  # fmt: skip
            continue
        strag = ", ".join(f"{x:.2f}" for x in r.straggler()) or "n/a"
        parts = ", ".join(f"{x:,}" for x in r.partials()) or "n/a"
        base = hash_partials.get(r.source)
        rel = f"{sum(r.partials()) / base:.2f}x" if base and r.partials() else "n/a"
        med = _fmt(statistics.median(r.straggler()), ".2f") if r.straggler() else "n/a"
        recs = ", ".join(f"{x:.2f}" for x in r.record_ratio()) or "n/a"
        read = f"{r.read:,}" + ("" if r.read == r.records else f" of {r.records:,} (**ERROR**)")
        lines.append(
            f"| {r.partitioner} | {r.source} | {read} | {_fmt(r.steady_rate)} | {_fmt(r.overall_rate)} | {strag} "
            f"| {med} | {recs} | {parts} | {rel} |"
        )
    errors = [r for r in results if r.error]
    if errors:
        lines += ["", "Errors:", ""] + [f"- {r.partitioner}/{r.source}: {r.error}" for r in errors]
    lines += ["", "Per batch (records, batch ms, combiner task ms by combiner; for source `kafka` in Spark's task "
              "order, which is not the combiner order):", ""]  # fmt: skip
    for r in results:
        for b in r.batches:
            if b.input_rows:
                lines.append(
                    f"- {r.partitioner}/{r.source} batch {b.batch_id}: {b.input_rows:,} records, {b.batch_ms} ms, "
                    f"tasks {b.combiner_task_ms} (JVM GC {b.combiner_gc_ms}), records {b.combiner_records}"
                )
    return "\n".join(lines) + "\n"


def main(
    partitioners: str = "hash,pkg,cam,dalton",
    records: int = 1_000_000,
    batch: int = 250_000,
    combiners: int = 8,
    keys: int = 10_000,
    zipf: float = 1.5,
    sink: str = "kafka",
    reducers: int = 2,
    warmup: int = 250_000,
    bootstrap: str | None = None,
    out: Path = Path("reports"),
    sources: str = "python",
    broker: str = "tansu",
    package: str | None = None,
) -> Path:
    """Run, print the table, write ``OUT/spark-bench.md`` (``skewroute spark-bench`` is the command line).

    ``broker``: the broker started when no ``bootstrap`` is given -- ``tansu`` (embedded) or ``kafka`` (one Apache
    Kafka KRaft node, resolved from Maven on its first start).
    """
    if sink not in ("kafka", "noop"):
        raise ValueError(f"sink must be kafka or noop, got {sink!r}")
    if broker not in ("tansu", "kafka"):
        raise ValueError(f"broker must be tansu or kafka, got {broker!r}")
    chosen = parse_sources(sources)
    a = argparse.Namespace(
        partitioners=partitioners, tuples=records, batch=batch, combiners=combiners, keys=keys, zipf=zipf, sink=sink,
        reducers=reducers, warmup=warmup, bootstrap=bootstrap, report=out / "spark-bench.md",
    )  # fmt: skip
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="skewroute-spark-bench-"))
    server = None if a.bootstrap else _start_broker(broker, workdir)
    try:
        kafka = KafkaSettings(bootstrap_servers=a.bootstrap or server.bootstrap)  # type: ignore[union-attr]
        names = [x.strip() for x in a.partitioners.split(",") if x.strip()]
        t0, load0 = time.monotonic(), os.getloadavg()[0]
        results = run_bench(
            kafka, names, tuples=a.tuples, batch=a.batch, n=a.combiners, keys=a.keys, s=a.zipf, sink=a.sink,
            reducers=a.reducers, workdir=workdir, warmup=a.warmup, sources=chosen, package=package,
        )  # fmt: skip
        params = {
            "records": a.tuples, "micro-batch": a.batch, "combiners": a.combiners, "zipf": a.zipf, "keys": a.keys,
            "sink": a.sink, "reducers": a.reducers, "sources": ",".join(chosen),
            "broker": a.bootstrap or broker, "master": "local[2]", "warm-up records": a.warmup,
            "connector": (package or DEFAULT_KAFKA_PACKAGE) if "kafka" in chosen else "-",
            "window": "10 s tumbling (1000 records/s event time)",
            "wall s": round(time.monotonic() - t0),
            "cores": os.cpu_count(), "load avg 1 min (start/end)": f"{load0:.1f}/{os.getloadavg()[0]:.1f}",
        }  # fmt: skip
        md = render_markdown(results, params)
        print(md)
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(md)
        print(f"report written to {a.report}")
    finally:
        if server is not None:
            server.stop()
    return Path(a.report)


def _start_broker(kind: str, workdir: Path) -> Any:
    """The embedded Tansu or a one-node Apache Kafka on a free port (stopped by the caller)."""
    if kind == "kafka":
        from connectors.apache_kafka import ApacheKafkaCluster

        return ApacheKafkaCluster(port=free_port(), state_dir=workdir / "kafka", heap="1g").start()
    return EmbeddedBroker(free_port(), state_dir=workdir).start()


if __name__ == "__main__":
    from router.cli import app

    app(["spark-bench", *sys.argv[1:]])
