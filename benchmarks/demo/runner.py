"""``skewroute demo`` end to end: broker, Spark, one pipeline per partitioner, checks, report.

Order: the embedded broker (unless a bootstrap is given) -> the Spark session, started and warmed up on a
thread (a small throw-away query, so the first measured micro-batch does not pay for Python worker start-up)
while the first run's router workers start -> per partitioner, :func:`~benchmarks.demo.pipeline.run_pipeline`
on the same input -> checks and the report. Everything started is stopped in ``finally`` blocks, so errors
and Ctrl-C leave no process behind.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.demo import checks
from benchmarks.demo.live import LiveView
from benchmarks.demo.options import DemoOptions, RunPlan, plan_run
from benchmarks.demo.pipeline import DemoRunError, PipelineRun, run_pipeline, stop_query
from benchmarks.demo.processes import Processes
from benchmarks.demo.report import render_markdown, routing_report, spark_plot, write_json
from benchmarks.demo.source import DemoInput, build_input
from connectors.broker import EmbeddedBroker, free_port
from spark_consumers.cluster import StandaloneCluster
from spark_consumers.sinks import result_key

__all__ = ["DemoResult", "run_demo"]

#: Both pipelines aggregated their last record within this many seconds of its production: they kept up.
KEPT_UP_S = 10.0


@dataclass(frozen=True)
class DemoResult:
    """The report document and where it was written."""

    doc: dict[str, Any]
    markdown: Path
    json: Path
    plots: list[Path]

    @property
    def exact(self) -> bool:
        """Whether every run's aggregates were exact."""
        return all(r["exactness"]["exact"] for r in self.doc["runs"].values())


class _Spark:
    """The shared Spark session, built and warmed up on a thread."""

    def __init__(self, plan: RunPlan, data: DemoInput) -> None:
        self.session: Any = None
        self.error: BaseException | None = None
        self.warm_up_error: str | None = None
        self._thread = threading.Thread(target=self._start, args=(plan, data), name="demo-spark", daemon=True)
        self._thread.start()

    def _start(self, plan: RunPlan, data: DemoInput) -> None:
        try:
            from spark_consumers.session import build_session

            self.session = build_session(plan.settings.spark, "skewroute-demo")
            self.session.sparkContext.setLogLevel("FATAL")  # query failures still surface through the query
        except BaseException as exc:  # reported when the session is needed
            self.error = exc
            return
        try:
            _warm_up(self.session, plan, data)
        except Exception as exc:  # the session still works; the first measured batch pays for the warm-up
            self.warm_up_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def ready(self) -> Any | None:
        """The session once it is warm, else ``None`` (raises :class:`DemoRunError` if it failed)."""
        if self.error is not None:
            raise DemoRunError(f"Spark did not start: {self.error}") from self.error
        return None if self._thread.is_alive() else self.session

    def stop(self) -> None:
        """Stop the session (a warm-up still running then fails and ends its thread)."""
        if self.session is not None:
            self.session.stop()
        self._thread.join(30)


def _warm_up(session: Any, plan: RunPlan, data: DemoInput, rounds: int = 2, size: int = 1_000) -> None:
    """Run the job's code paths on a throw-away route for a few micro-batches (Python workers, JIT)."""
    from benchmarks.spark.feed import produce_routed
    from connectors.admin import ensure_route_topics
    from spark_consumers.job import start_job

    ensure_route_topics(plan.settings.kafka, plan.route)
    handle = start_job(session, plan.settings)
    try:
        for r in range(rounds):
            part = slice(r * size, (r + 1) * size)
            keys, times = data.keys[part].tolist(), data.times[part].tolist()
            combiners = [i % plan.route.combiners for i in range(len(keys))]
            produce_routed(plan.settings.kafka, plan.route.combiner_topic_name, keys, times, [1.0] * len(keys),
                           combiners, offsets=range(part.start, part.start + len(keys)))  # fmt: skip
            deadline = time.monotonic() + 300
            while sum(b.input_rows for b in handle.stats) < part.start + len(keys):
                if handle.query.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"warm-up query: {handle.query.exception() or 'timed out'}")
                time.sleep(0.2)
    finally:
        stop_query(handle)


def _run_doc(
    opts: DemoOptions, data: DemoInput, run: PipelineRun, quality: tuple[Any, dict[str, float]]
) -> dict[str, Any]:
    exact = checks.exactness(data, run.results, opts.window_s * 1000)
    spark = checks.spark_summary(run.batches, opts.combiners)
    _, summary = quality
    return {
        "delivery": checks.delivery(run),
        "routing": {k: summary[k] for k in ("ratio_mean", "ratio_p95", "replication_mean", "replication_p95",
                                             "floor_mean", "partials_mean", "partials_floor_mean",
                                             "imbalance_mean", "max_load_mean", "reducer_max_mean", "windows")},
        "spark": spark,
        "throughput": {
            "seconds": run.seconds,
            "records_per_s": run.records / run.seconds if run.seconds > 0 else None,
            "produce_seconds": run.produce_end - run.produce_start,
            "drain_seconds": run.spark_end - run.produce_end,
        },
        "sync": checks.sync_summary(run),
        "routers": {"cpu_seconds": sum(run.router_cpu_s.values()), "per_worker": run.router_cpu_s},
        "exactness": {**exact.as_dict(), "wrong": exact.mismatching + exact.missing + exact.extra,
                      "missing_per_read": run.result_reads},
        "batches": [b.__dict__ for b in run.batches],
    }  # fmt: skip


def _verdict(doc: dict[str, Any], chosen: str, base: str) -> list[str]:
    runs = doc["runs"]
    out = []
    if base in runs and chosen != base:
        a, b = runs[chosen], runs[base]
        ra, rb = a["routing"]["ratio_mean"], b["routing"]["ratio_mean"]
        out.append(
            f"per-micro-batch balance (routed records): {chosen} max/mean {ra:.3f} vs {base} {rb:.3f} "
            f"({'better' if ra < rb else 'not better'}; {rb / ra:.2f}x), at replication "
            f"{a['routing']['replication_mean']:.3f} vs {b['routing']['replication_mean']:.3f}"
        )
        sa, sb = a["spark"]["straggler_mean"], b["spark"]["straggler_mean"]
        if sa is not None and sb is not None:
            out.append(f"Spark straggler ratio (mean over micro-batches): {chosen} {sa:.2f} vs {base} {sb:.2f}")
        pa, pb = a["spark"]["shuffled_partials"], b["spark"]["shuffled_partials"]
        out.append(
            f"shuffled partials: {chosen} {pa:,.0f} vs {base} {pb:,.0f} ({(pa - pb) / max(pb, 1):+.1%}; target "
            f"<= 1.05x {base}'s: {'met' if pa <= 1.05 * pb else 'MISSED'})"
        )
        rm = a["spark"].get("record_max_mean")
        if rm is not None and math.isfinite(rm):
            rb = b["spark"].get("record_max_mean", math.nan)
            met = "met" if rm <= 1.10 else "MISSED"
            out.append(
                f"per-micro-batch combiner records max/mean: {chosen} {rm:.3f} vs {base} {rb:.3f} (<= 1.10: {met})"
            )
        out.append(_end_to_end(doc["demo"]["rate"], a, b, chosen, base))
    for label, r in runs.items():
        e, d = r["exactness"], r["delivery"]
        state = "PASSED" if e["exact"] else "FAILED"
        out.append(
            f"{label}: exactness {state} ({e['matching']:,} of {e['expected']:,} (window, key) aggregates equal the "
            f"direct computation, {e['wrong']} wrong); {d['distinct_positions']:,} of {d['produced']:,} records "
            f"routed, {d['duplicates']} duplicates, {d['dead_letters']} dead letters"
        )
        reads = e.get("missing_per_read") or []
        if len(reads) > 1:
            out.append(
                f"{label}: the results topic was read {len(reads)} times; expected results missing after each "
                f"read: {', '.join(map(str, reads))}"
                + (" (a short read, not a loss: the topic holds them all)" if reads[-1] == 0 else "")
            )
    return out


def _end_to_end(rate: float, a: dict[str, Any], b: dict[str, Any], chosen: str, base: str) -> str:
    """The end-to-end difference, stated only where the run could show one (a backlog or a rate near capacity).

    Both pipelines "kept up" when each aggregated its last record within :data:`KEPT_UP_S` of producing it:
    the run was paced by the input, and its records/s say nothing about either pipeline.
    """
    ra, rb = a["throughput"]["records_per_s"], b["throughput"]["records_per_s"]
    da, db = a["throughput"]["drain_seconds"], b["throughput"]["drain_seconds"]
    both = f"{chosen} {ra:,.0f} vs {base} {rb:,.0f} records/s, last record aggregated {da:.1f} vs {db:.1f} s after"
    if rate > 0 and max(da, db) <= KEPT_UP_S:
        return (
            f"end-to-end: no difference to show at {rate:,.0f} records/s: both pipelines kept up with the input "
            f"({both} it was produced). Routing pays off on a backlog or near the direct job's capacity: "
            "`skewroute e2e-bench` measures both, with the direct baseline (the job reading the raw topic)"
        )
    faster = chosen if da < db else base
    return (
        f"end-to-end ({'full speed: a backlog' if rate <= 0 else 'the input outran a pipeline'}): {both} it was "
        f"produced; {faster} drained first ({max(da, db) / max(min(da, db), 1e-9):.2f}x). The direct baseline "
        "(no router) is measured by `skewroute e2e-bench`"
    )


def run_demo(opts: DemoOptions, command: str = "skewroute demo", view: LiveView | None = None) -> DemoResult:
    """Run the demo with ``opts`` and write its report under ``opts.out``."""
    started = time.monotonic()
    view = view or LiveView(enabled=opts.live)
    opts.out.mkdir(parents=True, exist_ok=True)
    data = build_input(opts.workload, opts.records, opts.rate, opts.seed)
    view.note(f"demo: {len(data):,} records of {data.description}; report in {opts.out}")
    window_ms = opts.window_s * 1000
    expected = frozenset(result_key(w, w + window_ms, k) for w, k in checks.reference_aggregates(data, window_ms))
    broker: EmbeddedBroker | None = None
    spark: _Spark | None = None
    cluster: StandaloneCluster | None = None
    runs: dict[str, PipelineRun] = {}
    try:
        if opts.cluster:  # executors in 2 worker JVMs with the packed environment (spark_consumers.envpack)
            cluster = StandaloneCluster(opts.out.resolve() / "spark-cluster")
            st = cluster.start(workers=2, cores=1, memory="1g")
            opts = replace(opts, spark_master=st.master_url)
            view.note(f"Spark standalone cluster {st.master_url}: 2 workers x 1 core")
        if opts.bootstrap is None:
            broker = EmbeddedBroker(free_port(), state_dir=opts.out / "broker").start()
            view.note(f"embedded broker (Tansu) on {broker.bootstrap}")
        bootstrap = opts.bootstrap or (broker.bootstrap if broker else "")
        prefix = f"demo-{datetime.now(UTC):%Y%m%d%H%M%S}-{os.getpid()}"
        warm = plan_run(opts, opts.baseline, prefix, bootstrap, (), tag="warmup")
        spark = _Spark(warm, data)
        with Processes() as procs, view:
            for label in opts.labels:
                ports = tuple(free_port() for _ in range(opts.routers))
                plan = plan_run(opts, label, prefix, bootstrap, ports)
                runs[label] = run_pipeline(
                    plan, data, spark.ready, procs, routers=opts.routers, rate=opts.rate, timeout_s=opts.timeout_s,
                    on_tick=view.update, expected_results=expected,
                )  # fmt: skip
                if spark.warm_up_error and len(runs) == 1:
                    view.note(f"Spark warm-up failed ({spark.warm_up_error}); the first run paid for it")
                view.note(
                    f"{label}: {runs[label].records:,} records through the pipeline in {runs[label].seconds:.1f} s"
                )
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        if cluster is not None:
            cluster.stop()
    return _write(opts, data, runs, command, bootstrap="embedded Tansu" if opts.bootstrap is None else opts.bootstrap,
                  seconds=time.monotonic() - started, warm_up_error=spark.warm_up_error if spark else None)  # fmt: skip


def _write(
    opts: DemoOptions,
    data: DemoInput,
    runs: dict[str, PipelineRun],
    command: str,
    *,
    bootstrap: str,
    seconds: float,
    warm_up_error: str | None,
) -> DemoResult:
    width = float(opts.slide_ms)
    quality = {label: checks.routing_quality(r, opts.combiners, opts.reducers, width) for label, r in runs.items()}
    for label, (_, summary) in quality.items():
        summary["tuples_per_s"] = runs[label].records / runs[label].seconds  # the bench table's rate column
    paths = routing_report(
        data.workload, quality, data.keys, data.times, n=opts.combiners, m=opts.reducers, routers=opts.routers,
        width_ms=width, out=opts.out / "routing",
    )  # fmt: skip
    spark_png = opts.out / "spark.png"
    spark_plot({label: r.batches for label, r in runs.items()}, spark_png)
    doc: dict[str, Any] = {
        "demo": {
            "workload": opts.workload, "description": data.description, "records": len(data), "rate": opts.rate,
            "rate_label": f"{opts.rate:,.0f} records/s" if opts.rate > 0 else "full speed",
            "routers": opts.routers, "combiners": opts.combiners, "reducers": opts.reducers,
            "partitioners": list(runs), "window_s": opts.window_s, "trigger_s": opts.trigger_s,
            "metric_window_ms": opts.slide_ms, "spark_master": opts.spark_master, "broker": bootstrap,
            "finished": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {socket.gethostname()} ({os.cpu_count()} cores)",
            "seconds": seconds, "command": command,
        },
        "runs": {label: _run_doc(opts, data, r, quality[label]) for label, r in runs.items()},
    }  # fmt: skip
    doc["demo"]["spark_warm_up"] = warm_up_error or "ok"
    doc["verdict"] = _verdict(doc, opts.partitioner, opts.baseline)
    if warm_up_error:
        doc["verdict"].append(f"Spark warm-up failed ({warm_up_error}): the first run's first micro-batch paid for it")
    md, js = opts.out / "report.md", opts.out / "report.json"
    write_json(doc, js)
    md.write_text(render_markdown(doc), encoding="utf-8")
    return DemoResult(doc, md, js, [paths["load"], paths["replication"], spark_png])
