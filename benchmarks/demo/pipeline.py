"""One partitioner's pipeline: raw topic -> router workers (subprocesses) -> combiner topic -> Spark job.

:func:`run_pipeline` creates the topics, starts the workers and waits until they own the raw partitions,
starts the route's streaming query on the shared Spark session, produces the input at the set rate, and
follows the run (``on_tick`` gets a :class:`Progress` twice a second) until Spark has read every routed
record. It then stops the query and the workers and reads back what the checks need: the combiner topic
(routing quality), the results topic (exactness) and the dead-letter topic.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from benchmarks.demo.options import RAW_PARTITIONS, RunPlan
from benchmarks.demo.processes import Child, Processes, router_command
from benchmarks.demo.source import DemoInput, Producer
from benchmarks.topic_reader import read_topic
from connectors.admin import ensure_route_topics, partition_count
from connectors.kafka import make_admin
from schemas.exceptions import SkewrouteError
from schemas.records import decode_routed_record
from spark_consumers.observability import BatchStats

__all__ = ["DemoRunError", "PipelineRun", "Progress", "WorkerView", "run_pipeline", "stop_query"]

log = logging.getLogger("benchmarks.demo")


class DemoRunError(SkewrouteError):
    """A pipeline run could not finish (a process died, a timeout); the message says which and why."""


@dataclass
class WorkerView:
    """What one router worker's ``/metrics`` said last."""

    name: str
    tuples_in: float = 0.0
    tuples_out: float = 0.0
    dead: float = 0.0
    assigned: float = 0.0
    ratio: float = 0.0
    replication: float = 0.0
    loads: list[float] = field(default_factory=list)
    reachable: bool = False


@dataclass
class Progress:
    """A snapshot of a running pipeline (for the live view)."""

    label: str
    phase: str
    elapsed_s: float
    total: int
    produced: int
    workers: list[WorkerView]
    spark_rows: int
    batches: list[BatchStats]

    @property
    def routed(self) -> int:
        """Records the workers routed (acknowledged by Kafka)."""
        return int(sum(w.tuples_out for w in self.workers))


@dataclass
class PipelineRun:
    """What a finished run hands to the checks and the report."""

    label: str
    records: int
    produce_start: float  # time.time()
    produce_end: float
    spark_end: float  # time.time() when Spark had processed every routed record
    workers: list[WorkerView]
    batches: list[BatchStats]
    combiner_records: list[dict[str, Any]]
    results: dict[bytes, dict[str, Any]]
    dead_letters: int
    control: list[dict[str, Any]]
    router_cpu_s: dict[str, float]  # CPU seconds of each router worker from the first record produced to the end
    #: expected results missing after each read of the results topic (one entry: the first read had them all)
    result_reads: list[int] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """First record produced -> last record aggregated by Spark."""
        return self.spark_end - self.produce_start


def _scrape(child: Child, url: str) -> WorkerView:
    from router.commands.worker import scrape  # the parser `skewroute status` uses

    view = WorkerView(child.name)
    try:
        routes = scrape(url, timeout=1.0)
    except OSError:
        return view
    view.reachable = True
    for rv in routes.values():
        v = rv.values
        view.tuples_in = v.get("skewroute_tuples_in_total", 0.0)
        view.tuples_out = v.get("skewroute_tuples_out_total", 0.0)
        view.assigned = v.get("skewroute_assigned_partitions", 0.0)
        view.ratio = v.get("skewroute_window_imbalance_ratio", 0.0)
        view.replication = v.get("skewroute_window_replication", 0.0)
        view.dead = sum(rv.dead.values())
        view.loads = [rv.loads[i] for i in sorted(rv.loads)]
    return view


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/<pid>/stat``); NaN when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _batch_end(b: BatchStats) -> float:
    start = datetime.fromisoformat(b.timestamp.replace("Z", "+00:00")).timestamp()
    return start + b.batch_ms / 1000


class _Follow:
    """Polls the workers and the query, raising :class:`DemoRunError` on any failure."""

    def __init__(self, plan: RunPlan, procs: Processes, workers: list[Child], on_tick: Callable[[Progress], None]):
        self.plan, self.procs, self.workers, self.on_tick = plan, procs, workers, on_tick
        self.start = time.monotonic()
        self.views = [WorkerView(c.name) for c in workers]
        self.handle: Any = None
        self.producer: Producer | None = None
        self.start_query: Callable[[], Any] | None = None
        self.restarts = 0

    def _restart_or_raise(self) -> None:
        """Start a query that failed before its first micro-batch again (twice at most); else raise.

        On an overloaded machine Spark's Python workers can miss their connect-back timeout.
        """
        exc = self.handle.query.exception()
        if self.handle.stats or self.restarts >= 2 or self.start_query is None:
            raise DemoRunError(f"the Spark query failed: {exc}")
        self.restarts += 1
        log.warning("%s: Spark query failed before its first batch (%s); starting it again", self.plan.label,
                    str(exc).splitlines()[0])  # fmt: skip
        self.handle.stop()
        self.handle = self.start_query()

    def tick(self, phase: str, total: int) -> Progress:
        dead = self.procs.failed()
        if dead is not None:
            raise DemoRunError(f"{dead.name} exited with code {dead.proc.returncode}; log tail:\n{dead.log_tail()}")
        if self.producer is not None and self.producer.error is not None:
            raise DemoRunError(f"producing the input failed: {self.producer.error}")
        if self.handle is not None and self.handle.query.exception() is not None:
            self._restart_or_raise()
        self.views = [
            _scrape(c, f"http://127.0.0.1:{port}/metrics")
            for c, port in zip(self.workers, self.plan.web_ports, strict=True)
        ]
        batches = self.handle.stats if self.handle is not None else []
        progress = Progress(
            self.plan.label,
            phase,
            time.monotonic() - self.start,
            total,
            self.producer.sent if self.producer is not None else 0,
            self.views,
            sum(b.input_rows for b in batches),
            batches,
        )
        self.on_tick(progress)
        return progress

    def wait(self, phase: str, total: int, done: Callable[[Progress], bool], timeout: float) -> Progress:
        deadline = time.monotonic() + timeout
        while True:
            p = self.tick(phase, total)
            if done(p):
                return p
            if time.monotonic() > deadline:
                raise DemoRunError(f"{self.plan.label}: timed out after {timeout:.0f} s while {phase}")
            time.sleep(0.5)


def run_pipeline(
    plan: RunPlan,
    data: DemoInput,
    spark: Callable[[], Any | None],
    procs: Processes,
    *,
    routers: int,
    rate: float,
    timeout_s: float,
    on_tick: Callable[[Progress], None],
    expected_results: frozenset[bytes] = frozenset(),
) -> PipelineRun:
    """Run ``data`` through ``plan``'s pipeline (workers started in ``procs``, stopped before returning).

    ``spark()`` returns the Spark session once it is warm, ``None`` before (and raises if it failed).
    ``expected_results``: the results-topic message keys the run must produce (see :func:`read_results`).
    """
    from spark_consumers.job import start_job

    s, route = plan.settings, plan.route
    Producer.create_topic(s.kafka, route.raw_topic)
    ensure_route_topics(s.kafka, route, s.router.control_topic)
    workers = [
        procs.start(f"router-{i + 1}", router_command(plan.config, port), plan.folder / f"router-{i + 1}.log",
                    {"SKEWROUTE_ROUTER__INSTANCE_ID": f"{plan.label}-router-{i + 1}"})
        for i, port in enumerate(plan.web_ports[:routers])
    ]  # fmt: skip
    follow = _Follow(plan, procs, workers, on_tick)
    try:
        follow.wait(
            "starting router workers", len(data),
            lambda p: sum(w.assigned for w in p.workers) >= RAW_PARTITIONS and all(w.assigned for w in p.workers),
            120,
        )  # fmt: skip
        follow.wait("warming up Spark", len(data), lambda p: spark() is not None, 900)
        session = spark()
        assert session is not None
        follow.start_query = lambda: start_job(session, s)
        follow.handle = follow.start_query()
        cpu0 = {w.name: _cpu_seconds(w.proc.pid) for w in workers}
        follow.producer = Producer(s.kafka, route.raw_topic, data, rate).start()
        total = len(data)
        budget = timeout_s + (total / rate if rate > 0 else 0)
        follow.wait("streaming", total, lambda p: p.spark_rows >= total and follow.producer.done, budget)  # type: ignore[union-attr]
        batches = follow.handle.stats
        final = follow.tick("stopping", total)
        cpu = {w.name: _cpu_seconds(w.proc.pid) - cpu0[w.name] for w in workers}
    finally:
        if follow.producer is not None:
            follow.producer.stop()
        if follow.handle is not None:
            stop_query(follow.handle)
        procs.stop_many(workers)
    producer = follow.producer
    assert producer is not None and producer.first_s is not None and producer.done_s is not None
    on_tick(replace(final, phase="reading back the topics"))
    reached = _cumulative(batches, total)
    results, reads = read_results(plan, expected_results)
    return PipelineRun(
        plan.label, total, producer.first_s, producer.done_s, _batch_end(reached), final.workers, batches,
        _combiner_records(plan, total), results, _count(plan, plan.route.dlq_topic_name),
        _control_messages(plan), cpu, reads,
    )  # fmt: skip


def stop_query(handle: Any, wait_s: float = 15.0) -> None:
    """Stop a streaming query between two triggers (interrupting a running trigger makes Spark print errors)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and handle.query.isActive and handle.query.status.get("isTriggerActive"):
        time.sleep(0.1)
    handle.stop()


def _combiner_records(plan: RunPlan, total: int) -> list[dict[str, Any]]:
    """Every routed record of the combiner topic, decoded."""
    topic = plan.route.combiner_topic_name
    records = read_topic(plan.settings.kafka, topic, expected=total, idle_s=3.0)
    return [decode_routed_record(r.value, r.key, topic, r.partition) or {} for r in records]


def read_results(
    plan: RunPlan, expected: frozenset[bytes] = frozenset(), reads: int = 3, pause_s: float = 2.0
) -> tuple[dict[bytes, dict[str, Any]], list[int]]:
    """The last result per (window, key) message key (the sink writes full aggregates, never deltas).

    The topic is read whole with a fresh consumer; while some of ``expected`` are missing it is read again (at
    most ``reads`` times, ``pause_s`` apart), so a read that stopped short is told apart from results that never
    reached the topic. Returns the last read's results and how many expected keys each read lacked.
    """
    missing: list[int] = []
    results: dict[bytes, dict[str, Any]] = {}
    for attempt in range(reads):
        if attempt:
            time.sleep(pause_s)
        results = {}
        for r in read_topic(plan.settings.kafka, plan.results_topic, idle_s=2.0):
            if r.key is not None and r.value is not None:
                results[r.key] = orjson.loads(r.value)
        missing.append(len(expected - results.keys()))
        if not missing[-1]:
            break
    if len(missing) > 1:
        log.warning("%s: reads of the results topic lacked %s of %d expected results", plan.label, missing,
                    len(expected))  # fmt: skip
    return results, missing


def _count(plan: RunPlan, topic: str) -> int:
    """Records in ``topic`` (0 when it does not exist)."""
    if not partition_count(make_admin(plan.settings.kafka), topic):
        return 0
    return len(read_topic(plan.settings.kafka, topic, idle_s=1.0))


def _control_messages(plan: RunPlan) -> list[dict[str, Any]]:
    """The Dalton sync messages of the run's control topic (type, sender, members)."""
    topic = plan.settings.router.control_topic
    if not partition_count(make_admin(plan.settings.kafka), topic):
        return []
    out = []
    for r in read_topic(plan.settings.kafka, topic, idle_s=1.0):
        try:
            m = orjson.loads(r.value or b"{}")
        except orjson.JSONDecodeError:
            continue
        out.append({"type": m.get("type"), "instance": m.get("instance") or m.get("reducer"),
                    "members": len(m.get("members") or [])})  # fmt: skip
    return out


def _cumulative(batches: list[BatchStats], total: int) -> BatchStats:
    """The micro-batch after which Spark had read ``total`` records."""
    seen = 0
    for b in batches:
        seen += b.input_rows
        if seen >= total:
            return b
    return batches[-1]
