"""Spark consumer benchmark: end-to-end records/s and per-batch combiner stragglers per routing algorithm.

For each partitioner: route a seeded Zipf stream with ``router.partitioners.create`` (no router process),
produce it as routed records to a fresh ``n``-partition combiner topic, then run the real job (Python source,
windowed aggregation, Kafka results sink by default) with ``availableNow`` and micro-batches of
``--batch`` records. Reported per algorithm: steady-state records/s (every batch but the first, which pays
for warm-up), and per batch the straggler ratio (max/median combiner task time) and shuffled partials.

    skewroute spark-bench --records 1000000 --batch 250000 -p hash,pkg,cam,dalton
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

import numpy as np

from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from connectors.workloads import make_workload
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.lab.feed import assign_combiners, produce_routed
from spark_consumers.observability import BatchStats

__all__ = ["BenchResult", "main", "render_markdown", "run_bench"]

BASE_MS = 1_700_000_000_000


@dataclass
class BenchResult:
    """One algorithm's run."""

    partitioner: str
    records: int
    produce_s: float = 0.0
    batches: list[BatchStats] = field(default_factory=list)
    error: str | None = None

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
) -> list[BenchResult]:
    """Run every partitioner through the job on one SparkSession (see the module docstring)."""
    from spark_consumers.job import build_session, start_job

    stream_keys, times, measures = _stream(tuples, keys, s, seed)
    out: list[BenchResult] = []
    spark = None
    # Warm-up: one unreported pass (shuffle-routed prefix of the stream) so the JVM's JIT, the Python workers and
    # their pooled Kafka clients are warm before the first measured algorithm, which would otherwise pay for it.
    runs = ([("warm-up", min(warmup, tuples))] if warmup > 0 else []) + [(p, tuples) for p in partitioners]
    for name, count in runs:
        res = BenchResult(name, count)
        if name != "warm-up":
            out.append(res)
        try:
            combiners = assign_combiners(stream_keys[:count], "shuffle" if name == "warm-up" else name, n, seed=seed)
        except Exception as exc:  # not implemented yet, or broken: report n/a
            res.error = f"{type(exc).__name__}: {exc}"
            continue
        raw = f"bench-{name.replace('-', '')}-{os.getpid()}-{time.monotonic_ns()}"
        settings = SkewrouteSettings.load(
            kafka=kafka,
            routes=[{"raw_topic": raw, "combiners": n}],
            spark={
                "max_records_per_trigger": batch,
                "window": "10 seconds",
                "watermark": "30 seconds",
                "checkpoint_dir": str(workdir / "checkpoints"),
                "progress_log": str(workdir / "progress.jsonl"),
                "shuffle_partitions": reducers,
                "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
            },
        )
        route = settings.routes[0]
        ensure_topics(make_admin(kafka), [TopicSpec(route.combiner_topic_name, n, exact=True)])
        t0 = time.monotonic()
        produce_routed(
            kafka,
            route.combiner_topic_name,
            stream_keys[:count],
            times[:count],
            measures[:count],
            combiners,
            raw_topic=raw,
        )
        res.produce_s = time.monotonic() - t0
        if spark is None:
            spark = build_session(settings.spark, "skewroute-spark-bench")
            spark.sparkContext.setLogLevel("ERROR")
        handle = start_job(spark, settings, available_now=True, sink=sink)
        handle.query.awaitTermination()
        time.sleep(1.0)
        handle.stop()
        res.batches = handle.stats
        if handle.query.exception() is not None:
            res.error = str(handle.query.exception())[:200]
        if log:
            print(f"{name}: {_fmt(res.steady_rate)} rec/s steady, straggler {res.straggler()}", file=sys.stderr)
    return out


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "n/a" if x is None else format(x, spec)


def render_markdown(results: list[BenchResult], params: dict[str, object]) -> str:
    """The report: a summary table per algorithm and the per-batch figures."""
    lines = [
        "# Spark consumer benchmark",
        "",
        "Parameters: " + ", ".join(f"{k}={v}" for k, v in params.items()),
        "",
        "| routing | steady rec/s | all-batch rec/s | straggler ratio per batch (max/median task time) | "
        "median straggler | max/median task records | shuffled partials per batch | partials vs hash |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    hash_partials = next((sum(r.partials()) for r in results if r.partitioner == "hash" and r.partials()), None)
    for r in results:
        if r.error and not r.batches:
            lines.append(f"| {r.partitioner} | n/a | n/a | n/a ({r.error[:60]}) | n/a | n/a | n/a | n/a |")
            continue
        strag = ", ".join(f"{x:.2f}" for x in r.straggler()) or "n/a"
        parts = ", ".join(f"{x:,}" for x in r.partials()) or "n/a"
        rel = f"{sum(r.partials()) / hash_partials:.2f}x" if hash_partials and r.partials() else "n/a"
        med = _fmt(statistics.median(r.straggler()), ".2f") if r.straggler() else "n/a"
        recs = ", ".join(f"{x:.2f}" for x in r.record_ratio()) or "n/a"
        lines.append(
            f"| {r.partitioner} | {_fmt(r.steady_rate)} | {_fmt(r.overall_rate)} | {strag} | {med} | {recs} "
            f"| {parts} | {rel} |"
        )
    lines += ["", "Per batch (records, batch ms, combiner task ms by combiner):", ""]
    for r in results:
        for b in r.batches:
            if b.input_rows:
                lines.append(
                    f"- {r.partitioner} batch {b.batch_id}: {b.input_rows:,} records, {b.batch_ms} ms, "
                    f"tasks {b.combiner_task_ms}, records {b.combiner_records}"
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
) -> Path:
    """Run, print the table, write ``OUT/spark-bench.md`` (``skewroute spark-bench`` is the command line)."""
    if sink not in ("kafka", "noop"):
        raise ValueError(f"sink must be kafka or noop, got {sink!r}")
    a = argparse.Namespace(
        partitioners=partitioners, tuples=records, batch=batch, combiners=combiners, keys=keys, zipf=zipf, sink=sink,
        reducers=reducers, warmup=warmup, bootstrap=bootstrap, report=out / "spark-bench.md",
    )  # fmt: skip
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    workdir = Path(tempfile.mkdtemp(prefix="skewroute-spark-bench-"))
    broker = None if a.bootstrap else EmbeddedBroker(free_port(), state_dir=workdir).start()
    try:
        kafka = KafkaSettings(bootstrap_servers=a.bootstrap or broker.bootstrap)  # type: ignore[union-attr]
        names = [x.strip() for x in a.partitioners.split(",") if x.strip()]
        t0, load0 = time.monotonic(), os.getloadavg()[0]
        results = run_bench(
            kafka, names, tuples=a.tuples, batch=a.batch, n=a.combiners, keys=a.keys, s=a.zipf, sink=a.sink,
            reducers=a.reducers, workdir=workdir, warmup=a.warmup,
        )  # fmt: skip
        params = {
            "records": a.tuples, "micro-batch": a.batch, "combiners": a.combiners, "zipf": a.zipf, "keys": a.keys,
            "sink": a.sink, "reducers": a.reducers, "master": "local[2]", "warm-up records": a.warmup,
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
        if broker is not None:
            broker.stop()
    return Path(a.report)


if __name__ == "__main__":
    from router.cli import app

    app(["spark-bench", *sys.argv[1:]])
