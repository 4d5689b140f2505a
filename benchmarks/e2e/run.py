"""Orchestration of ``skewroute e2e-bench``: per ``n``, a backlog phase then a rate phase for every configuration.

Backlog phase (drain): the seeded input is produced to the configuration's keyed raw topic as fast as
possible; routed configurations first route all of it with their router workers (started, owning their
partitions, then fed; their CPU counted from then on); then the job drains the topic (``availableNow``,
micro-batches of at most ``batch`` records) while the CPU of the Spark process tree is counted. The results
are checked against a direct computation.

Rate phase (latency): the job (processing-time trigger) and the router workers run while the input is produced
at a fixed rate -- by default a fraction of the direct job's drain rate measured in the backlog phase, i.e.
near the direct pipeline's capacity -- and every record's latency is read back from the results topic.

Warm-up and run order (why routed hash once drained ~2x faster than direct): the configurations run one after
the other in one Spark session, direct first. The session keeps getting faster over its first few hundred
thousand records (JVM JIT, Python workers and their cached consumers), so a short warm-up (20k records) left
most of that cost to the first measured configuration. Measured on this machine (n = 8, 100k records,
micro-batches of 25k, same session, load 5-9): direct, hash, hash, direct, direct, hash drained at 4.0k, 9.5k,
11.1k, 11.4k, 13.9k, 10.3k records/s -- direct first was slow, direct later was as fast as hash. The same query
reading the raw topic and the hash-routed combiner topic alternately drains both at the same rate (the topics'
layouts -- record sizes, Kafka batches, keys -- make no difference), so the gap was the run order, not
routing. Therefore:

- the warm-up is a direct backlog pass of the measured size, on the first ``n``, repeated until two
  consecutive passes drain within ``warm_tolerance`` of each other (at most ``warm_passes``); its rates are in
  ``result.json`` (``warm_up``) and the report;
- then one unreported backlog pass of every other configuration (``warm_up.configs``): each plan (the routed
  topic and its decoding, the split reader) has code of its own to compile, and without that pass whichever
  configuration ran first after the direct passes drained 20-30 % slower than later in the session (n = 2, heavy
  profile, 2026-11-26: Dalton 1.27x direct measured after direct, 0.81x measured before it);
- after the other configurations of an ``n``, direct's backlog is measured once more (``recheck``); the
  report shows both rates and their drift, the noise floor of every ratio against direct, and its goals and
  verdict divide a measured drain by the faster of direct's two passes (the table's "vs direct" column keeps
  the first pass);
- ``rounds`` > 1 drains every configuration again, the order reversed every other round, and pairs each drain
  with direct's of the same round (:mod:`benchmarks.e2e.rounds`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.demo import checks
from benchmarks.demo.pipeline import stop_query
from benchmarks.demo.processes import Processes
from benchmarks.demo.source import DemoInput, build_input
from benchmarks.e2e.exact import heavy_exactness
from benchmarks.e2e.feed import KeyedProducer, Routers
from benchmarks.e2e.measures import drift, partials_floor, percentiles, settled, tree_cpu_seconds
from benchmarks.e2e.model import predicted_check
from benchmarks.e2e.plan import E2EOptions, RunSpec, session_config
from benchmarks.e2e.query import CORES, RestartingQuery, batch_stages, batch_summary, shuffle_written
from benchmarks.e2e.results import latencies, latency_series, read_results
from benchmarks.e2e.rounds import run_rounds
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from schemas.exceptions import SkewrouteError

__all__ = ["run_e2e", "run_one"]

log = logging.getLogger("benchmarks.e2e")


def _spark_pid(spark: Any) -> int:
    return int(spark.sparkContext._gateway.proc.pid)


def _topics(spec: RunSpec) -> None:
    names = {spec.raw_topic, spec.read_topic, spec.results_topic, f"{spec.tag}.dlq"}
    specs = [TopicSpec(t, spec.n, exact=True) for t in sorted(names)]
    if spec.routed:
        specs.append(TopicSpec(f"{spec.tag}.control", 1))  # Dalton's sync
    ensure_topics(make_admin(spec.settings().kafka), specs)


def _drop_topics(spec: RunSpec) -> None:
    """Delete the run's topics (the embedded broker keeps everything in memory)."""
    admin = make_admin(spec.settings().kafka)
    names = [spec.raw_topic, spec.read_topic, spec.results_topic, f"{spec.tag}.dlq", f"{spec.tag}.control"]
    try:
        for fut in admin.delete_topics(sorted(set(names)), operation_timeout=10).values():
            with contextlib.suppress(Exception):  # a topic that never existed
                fut.result(15)
    except Exception as exc:  # noqa: BLE001 - cleanup only
        log.warning("deleting topics of %s: %s", spec.tag, exc)


def run_one(spark: Any, spec: RunSpec, data: DemoInput, procs: Processes, rate: float) -> dict[str, Any]:
    """One configuration in one phase (``spec.phase``); returns its part of ``result.json``."""
    o = spec.opts
    settings = spec.settings()
    _topics(spec)
    doc: dict[str, Any] = {"config": spec.config, "n": spec.n, "phase": spec.phase, "records": len(data)}
    routers: Routers | None = None
    query: RestartingQuery | None = None
    backlog = spec.phase == "backlog"
    producer = KeyedProducer(settings.kafka, spec.raw_topic, data, 0.0 if backlog else rate)
    try:
        if spec.routed:
            routers = Routers(spec, procs, o.routers).start()
        if backlog:
            doc["partials_floor"] = partials_floor(data.keys, data.times, o.batch, spec.n, o.window_s * 1000)
            t0 = time.monotonic()
            producer.run_to_end()
            if routers is not None:
                routers.wait(lambda v: sum(x["routed"] for x in v) >= len(data), o.timeout_s, "routing the backlog")
                doc["route_s"] = time.monotonic() - t0
                doc["router_cpu_s"] = routers.cpu_seconds() - routers.cpu0  # the routing only, not the idle drain
        cpu0 = tree_cpu_seconds(_spark_pid(spark))
        t_start = time.monotonic()
        query = RestartingQuery(spark, settings, spec, backlog, o.split_factor * spec.n)
        if backlog:
            query.await_end(o.timeout_s)
        else:
            producer.start()
            deadline = time.monotonic() + o.timeout_s + len(data) / rate
            while sum(b.input_rows for b in query.handle.stats) < len(data) or not producer.done:
                if producer.error is not None:
                    raise SkewrouteError(f"{spec.tag}: producing failed: {producer.error}")
                query.failed_early()
                if routers is not None:
                    routers.wait(lambda v: True, 1, "")  # raises when a worker died
                if time.monotonic() > deadline:
                    raise SkewrouteError(f"{spec.tag}: timed out waiting for Spark to read every record")
                time.sleep(0.2)
        time.sleep(1.0)  # the listener's last progress event
        handle = query.handle
        stop_query(handle)
        doc["spark_wall_s"] = time.monotonic() - t_start
        doc["spark_cpu_s"] = tree_cpu_seconds(_spark_pid(spark)) - cpu0
        if routers is not None and backlog:  # routed already: what the idle workers took from the drain's cores
            doc["router_cpu_drain_s"] = routers.cpu_seconds() - routers.cpu0 - doc["router_cpu_s"]
        if handle.query.exception() is not None:
            raise SkewrouteError(f"{spec.tag}: the query failed: {handle.query.exception()}")
        run_id = str(handle.query.runId)
        data_batches = [b for b in handle.stats if b.input_rows > 0]
        stages = batch_stages(spark, run_id, [b.combiner_task_ms for b in data_batches])
        doc["spark"] = batch_summary(handle.stats, stages, o.slots, tuple(sorted({*CORES, spec.n})), spec.n)
        doc["spark"]["shuffled_all_stages"] = shuffle_written(spark, run_id)
        if routers is not None:
            doc.setdefault("router_cpu_s", routers.cpu_seconds() - routers.cpu0)
            doc["routed"] = routers.routed()
    finally:
        producer.stop()
        if query is not None and query.handle.query.isActive:
            query.handle.stop()
        if routers is not None:
            routers.stop()
    router_cpu = doc.get("router_cpu_s", 0.0)
    doc["router_cpu_s_per_million"] = router_cpu / len(data) * 1e6 if spec.routed else None
    doc["spark_cpu_us_per_record"] = doc["spark_cpu_s"] / len(data) * 1e6
    doc["total_cpu_us_per_record"] = (doc["spark_cpu_s"] + router_cpu) / len(data) * 1e6
    doc["spark_cpu"] = {"seconds": doc["spark_cpu_s"], "us_per_record": doc["spark_cpu_us_per_record"],
                        "while": "draining" if backlog else "the rate phase"}  # fmt: skip
    doc["router_cpu"] = {"seconds": router_cpu if spec.routed else None,
                         "us_per_record": router_cpu / len(data) * 1e6 if spec.routed else None,
                         "while": ("routing the backlog, before the drain" if backlog else "the rate phase")
                         if spec.routed else None}  # fmt: skip
    last, every = read_results(spec)
    exact = checks.exactness(data, last, o.window_s * 1000)
    heavy = heavy_exactness(data, last, o.window_s * 1000, o.aggregations, o.score_rounds,
                            settings.spark.percentiles, o.percentile_accuracy)  # fmt: skip
    wrong = exact.mismatching + exact.missing + exact.extra + heavy["wrong"]
    doc["exactness"] = {**exact.as_dict(), "wrong": wrong, "heavy": heavy}
    doc["exactness"]["exact"] = exact.exact and heavy["wrong"] == 0
    doc["exactness"]["examples"] = exact.examples + heavy["examples"]
    if not doc["exactness"]["exact"]:
        log.warning(
            "%s: not exact (%d missing, %d extra, %d mismatching, %d heavy wrong), e.g. %s",
            spec.tag,
            exact.missing,
            exact.extra,
            exact.mismatching,
            heavy["wrong"],
            doc["exactness"]["examples"][:3],
        )
    if spec.phase == "rate":
        lat = latencies(data, producer.sent_s, every, o.window_s * 1000)
        ok = lat[np.isfinite(lat)]
        doc["latency"] = {"rate": rate, "counted": int(ok.size), **percentiles(ok),
                          "series": latency_series(producer.sent_s, lat, producer.first_s or 0.0)}  # fmt: skip
    _drop_topics(spec)
    return doc


def _warm_up(spark: Any, opts: E2EOptions, prefix: str, folder: Path, bootstrap: str, procs: Processes
             ) -> dict[str, Any]:  # fmt: skip
    """Unreported direct backlog passes until the drain rate settles (see the module docstring).

    With ``-jvm`` configurations, one more unreported pass with the JVM source (``direct-jvm``) afterwards, so the
    first JVM run does not pay for the connector's classes and JIT either.
    """
    doc: dict[str, Any] = {"records": opts.warmup, "n": opts.combiners[0], "rates": [], "settled": False,
                           "tolerance": opts.warm_tolerance}  # fmt: skip
    if opts.warmup <= 0:
        return doc
    data = build_input(opts.workload, opts.warmup, 0, opts.seed + 99)
    for i in range(max(1, opts.warm_passes)):
        spec = RunSpec("direct", opts.combiners[0], "backlog", f"{prefix}-warm{i}", folder / "warm-up" / str(i),
                       bootstrap, opts)  # fmt: skip
        try:
            run = run_one(spark, spec, data, procs, 0.0)
        except SkewrouteError as exc:  # the first measured configuration pays for the warm-up then
            log.warning("warm-up pass %d failed: %s", i + 1, exc)
            doc["error"] = str(exc)
            break
        doc["rates"].append(run["spark"]["steady_rate"])
        log.info("warm-up pass %d: %s records/s", i + 1, run["spark"]["steady_rate"])
        if settled(doc["rates"], opts.warm_tolerance):
            doc["settled"] = True
            break
    if session_config(opts.configs) != "direct":
        spec = RunSpec(session_config(opts.configs), opts.combiners[0], "backlog", f"{prefix}-warmjvm",
                       folder / "warm-up" / "jvm", bootstrap, opts)  # fmt: skip
        try:
            doc["jvm_rate"] = run_one(spark, spec, data, procs, 0.0)["spark"]["steady_rate"]
        except SkewrouteError as exc:
            log.warning("JVM-source warm-up pass failed: %s", exc)
    doc["configs"] = {}
    for config in [c for c in dict.fromkeys(opts.configs) if c not in ("direct", session_config(opts.configs))]:
        spec = RunSpec(config, opts.combiners[0], "backlog", f"{prefix}-warm-{config}",
                       folder / "warm-up" / config, bootstrap, opts)  # fmt: skip
        try:
            doc["configs"][config] = run_one(spark, spec, data, procs, 0.0)["spark"]["steady_rate"]
        except SkewrouteError as exc:
            log.warning("%s warm-up pass failed: %s", config, exc)
        else:
            log.info("warm-up pass of %s: %s records/s", config, doc["configs"][config])
    return doc


def _measured(spark: Any, spec: RunSpec, data: DemoInput, procs: Processes, rate: float) -> dict[str, Any]:
    """:func:`run_one`, or the error that stopped it (the other configurations still run)."""
    try:
        return run_one(spark, spec, data, procs, rate)
    except SkewrouteError as exc:
        log.error("%s failed: %s", spec.tag, exc)
        return {"config": spec.config, "n": spec.n, "phase": spec.phase, "records": len(data), "error": str(exc)}


def _recheck(spark: Any, opts: E2EOptions, n: int, prefix: str, bootstrap: str, data: DemoInput, procs: Processes,
             first: float | None) -> dict[str, Any]:  # fmt: skip
    """Direct's backlog measured again after the other configurations of ``n``: its drift from the first time."""
    spec = RunSpec("direct", n, "backlog", f"{prefix}-again", opts.out / f"n{n}" / "backlog" / "direct-again",
                   bootstrap, opts)  # fmt: skip
    run = _measured(spark, spec, data, procs, 0.0)
    again = run.get("spark", {}).get("steady_rate")
    out = {"n": n, "config": "direct", "first_rate": first, "again_rate": again, "drift": drift(first, again)}
    if "error" in run:
        return out | {"error": run["error"]}
    return out | {"exact": run["exactness"]["exact"], "examples": run["exactness"]["examples"][:5]}


def _rounds(spark: Any, opts: E2EOptions, n: int, prefix: str, bootstrap: str, data: DemoInput, procs: Processes,
            on_run: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Backlog rounds 2..``opts.rounds`` of every configuration of ``n`` (:mod:`benchmarks.e2e.rounds`)."""

    def measure(config: str, r: int) -> dict[str, Any]:
        spec = RunSpec(config, n, "backlog", f"{prefix}-r{r}", opts.out / f"n{n}" / "backlog" / f"round{r}" / config,
                       bootstrap, opts)  # fmt: skip
        run = _measured(spark, spec, data, procs, 0.0)
        if on_run is not None:
            on_run(run | {"phase": f"round {r}"})
        return run

    return run_rounds(measure, opts.configs, opts.rounds, n)


#: The configurations drained again on one slot to check the model (those of the run among them).
MODEL_CONFIGS = ("direct", "direct-split", "dalton")


def _model_check(opts: E2EOptions, prefix: str, bootstrap: str, data: DemoInput, procs: Processes,
                 runs: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:  # fmt: skip
    """Drain again on ``local[1]`` and predict the ``local[{slots}]`` micro-batches measured before from its tasks.

    At the smallest ``n`` of the run, for each of :data:`MODEL_CONFIGS` the run has: the same backlog (the same
    micro-batches: ``availableNow`` with the same ``batch`` cap) drained by a new ``local[1]`` session after one
    unreported warm-up pass of each of those configurations; each steady batch's time on ``slots`` slots is
    predicted with :func:`~benchmarks.e2e.model.batch_ms_on` and compared with the batch measured on ``slots``
    slots. Routed configurations route again, so their combiner layout can differ a little from the measured
    run's. Returns the check's document and the session (the caller stops it).
    """
    from spark_consumers.session import build_session

    one = replace(opts, slots=1, out=opts.out / "model-check")
    n = min(opts.combiners)
    configs = [c for c in MODEL_CONFIGS if c in opts.configs]
    spec0 = RunSpec("direct", n, "backlog", f"{prefix}-m1", one.out / "session", bootstrap, one)
    spark = build_session(spec0.settings().spark, "skewroute-e2e-bench-model")
    spark.sparkContext.setLogLevel("ERROR")
    doc: dict[str, Any] = {"n": n, "measured_slots": opts.slots, "master": spark.sparkContext.master, "configs": []}
    # warm only what it drains: each configuration's first pass in a session is slower than its later ones
    warm = replace(one, warm_passes=1, combiners=(n,), configs=tuple(configs))
    doc["warm_up"] = _warm_up(spark, warm, f"{prefix}-m1", one.out, bootstrap, procs)
    for config in configs:
        spec = RunSpec(config, n, "backlog", f"{prefix}-m1", one.out / config, bootstrap, one)
        run = _measured(spark, spec, data, procs, 0.0)
        ref = next((r for r in runs if (r["config"], r["n"], r["phase"]) == (config, n, "backlog")
                    and "error" not in r), None)  # fmt: skip
        doc["configs"].append(predicted_check(config, run, ref, opts.slots))
    return doc, spark


def run_e2e(opts: E2EOptions, bootstrap: str, on_run: Any = None) -> dict[str, Any]:
    """Every configuration, phase and ``n`` of ``opts``; the ``result.json`` document."""
    from spark_consumers.session import build_session

    prefix = f"e2e-{datetime.now(UTC):%H%M%S}-{os.getpid()}"
    backlog = build_input(opts.workload, opts.records, 0, opts.seed)
    first = RunSpec(session_config(opts.configs), opts.combiners[0], "backlog", prefix, opts.out / "session",
                    bootstrap, opts)  # fmt: skip
    spark: Any = build_session(first.settings().spark, "skewroute-e2e-bench")
    spark.sparkContext.setLogLevel("ERROR")
    runs: list[dict[str, Any]] = []
    rechecks: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    warm: dict[str, Any] = {}
    check: dict[str, Any] = {}
    load0 = os.getloadavg()
    started = time.monotonic()
    interrupted = False
    try:
        with Processes() as procs:
            warm = _warm_up(spark, opts, prefix, opts.out, bootstrap, procs)
            for n in opts.combiners:
                rates: dict[str, float] = {}
                for config in opts.configs:
                    spec = RunSpec(config, n, "backlog", prefix, opts.out / f"n{n}" / "backlog" / config, bootstrap,
                                   opts)  # fmt: skip
                    doc = _measured(spark, spec, backlog, procs, 0.0)
                    rates[config] = doc.get("spark", {}).get("steady_rate") or 0.0
                    runs.append(doc)
                    if on_run is not None:
                        on_run(doc)
                if opts.recheck and "direct" in opts.configs:
                    rechecks.append(_recheck(spark, opts, n, prefix, bootstrap, backlog, procs, rates.get("direct")))
                if opts.rounds > 1:
                    rounds.extend(_rounds(spark, opts, n, prefix, bootstrap, backlog, procs, on_run))
                if not opts.rate_phase(n):
                    continue
                rate = opts.rate or opts.rate_fraction * rates.get("direct", max(rates.values(), default=1_000.0))
                rate = max(100.0, rate)
                data = build_input(opts.workload, int(rate * opts.rate_seconds), rate, opts.seed + 1)
                for config in opts.configs:
                    spec = RunSpec(config, n, "rate", prefix, opts.out / f"n{n}" / "rate" / config, bootstrap, opts)
                    doc = _measured(spark, spec, data, procs, rate)
                    runs.append(doc)
                    if on_run is not None:
                        on_run(doc)
            if opts.model_check:
                spark.stop()
                spark = None
                check, spark = _model_check(opts, prefix, bootstrap, backlog, procs, runs)
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: report what was measured so far
        interrupted = True
    finally:
        if spark is not None:
            spark.stop()
    worst = [abs(c["error"]["total"]) for c in check.get("configs", []) if c.get("error", {}).get("total") is not None]
    return {
        "interrupted": interrupted,
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in replace(opts).__dict__.items()},
        "aggregations": opts.aggregations,
        "machine": {"cores": os.cpu_count(), "load_start": list(load0), "load_end": list(os.getloadavg())},
        "finished": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "seconds": time.monotonic() - started,
        "warm_up": warm,
        "rechecks": rechecks,
        "rounds": rounds,
        "runs": runs,
        "model_check": check,
        "model_error": max(worst) if worst else None,
    }
