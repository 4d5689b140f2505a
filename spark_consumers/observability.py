"""Per micro-batch combiner metrics: task times (one per combiner), shuffled partials, straggler ratio.

A :class:`StreamingQueryListener` reacts to each ``QueryProgressEvent``; it finds the Spark jobs of that
micro-batch through the status tracker (a streaming query runs its jobs in a job group named by its run id),
takes the *combiner stage* -- the stage that reads the source and writes the shuffle, i.e. the scan tasks
with Spark's partial aggregation -- and reads every task of it from the status store through py4j (works with
the UI disabled). The per-task lists are then put in combiner order (entry ``i`` is combiner ``i``, i.e.
partition ``i`` of the combiner topic) by :mod:`spark_consumers.task_attribution`: with skewroute's Python
source task ``i`` is partition ``i``; Spark's JVM Kafka source (``spark.source: kafka``) plans its tasks in an
order of its own and drops empty ranges, so its tasks are matched to partitions by their record counts against
the batch's per-partition offset deltas. ``combiner_attribution`` says how each batch was attributed
(``source-order``, ``by-records`` exact, ``by-rank`` best guess when transaction markers make deltas exceed
counts, ``unattributed`` when the tasks cannot be matched: Spark's task order kept, sums and ratios still
right). The source is given by the job (``spark.source``) or, when not, read from the progress event (the JVM
source describes itself as ``KafkaV2[...]``).

Per batch it records: ``combiner_task_ms`` (executor run time per combiner), ``combiner_records`` (records read
per combiner), ``shuffled_partials`` (shuffle records written by the combiner stage = partial aggregates sent to
reducers), ``straggler_ratio`` = max / median combiner task time, ``record_ratio`` = max / median records per
combiner task (the same ratio in records: what the straggler ratio would be on quiet, dedicated cores), rows
dropped by the watermark, and ``groups``, the (window, key) groups the aggregation updated (``shuffled_partials /
groups`` is the partials per group the routing costs). Each batch is appended as one JSON line to the progress log
and published as Prometheus metrics.

Rows dropped by the watermark (``numRowsDroppedByWatermark`` of the batch's state operators: records, or
partial aggregates for an aggregation, later than the watermark) are missing from the results although the
source read them; every batch with drops logs one WARNING naming the count and what to change, and the run's
total is :attr:`RunStats.rows_dropped_by_watermark`.
"""

from __future__ import annotations

import json
import logging
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from spark_consumers.task_attribution import attribute_tasks, partition_deltas

__all__ = [
    "BatchStats",
    "CombinerMetricsListener",
    "RunStats",
    "combiner_stage_stats",
    "source_deltas",
    "source_kind",
    "source_lag",
]

log = logging.getLogger(__name__)

_STRAGGLER = Gauge("skewroute_spark_straggler_ratio", "max/median combiner task time, last batch", ["query"])
_PARTIALS = Gauge("skewroute_spark_shuffled_partials", "partial aggregates shuffled to reducers, last batch", ["query"])
_ROWS = Gauge("skewroute_spark_batch_input_rows", "records in the last micro-batch", ["query"])
_LAG = Gauge("skewroute_spark_source_lag", "records between the batch's end and the latest offsets", ["query"])
_LOSS = Counter(
    "skewroute_spark_source_data_loss",
    "partitions whose offsets went backwards (recreated/truncated topic skipped under failOnDataLoss=false)",
    ["query"],
)
_DROPPED = Counter(
    "skewroute_spark_rows_dropped_by_watermark",
    "rows later than the watermark, dropped by the stateful operators (missing from the results)",
    ["query"],
)
_TASK = Histogram(
    "skewroute_spark_combiner_task_seconds",
    "combiner (scan + partial aggregation) task run time",
    ["query"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)


@dataclass
class BatchStats:
    """What one micro-batch did at the combiner stage."""

    query: str
    batch_id: int
    timestamp: str
    input_rows: int
    batch_ms: int
    processed_rows_per_second: float
    combiner_task_ms: list[int] = field(default_factory=list)
    combiner_records: list[int] = field(default_factory=list)
    shuffled_partials: int = 0
    straggler_ratio: float | None = None
    record_ratio: float | None = None
    rows_dropped_by_watermark: int = 0
    state_rows: int = 0
    groups: int = 0  #: (window, key) groups the aggregation updated (``stateStoreSave``): partials with no key split
    phase_ms: dict[str, int] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    skipped_partitions: int = 0
    combiner_attribution: str = ""
    #: JVM garbage-collection time during each combiner task (Spark's ``jvmGcTime``: counted from the task's
    #: start, its deserialization included, which ``combiner_task_ms`` leaves out: it can exceed that)
    combiner_gc_ms: list[int] = field(default_factory=list)

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(asdict(self), separators=(",", ":"))


class RunStats(list[BatchStats]):
    """The batch stats of a run, in order, with the run's totals."""

    @property
    def rows_dropped_by_watermark(self) -> int:
        """Rows the run dropped as later than the watermark (summed over batches): missing from the results."""
        return sum(s.rows_dropped_by_watermark for s in self)


def _offsets(raw: Any) -> dict[str, dict[str, int]]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    if not isinstance(parsed, dict):
        return {}
    return {t: {str(p): int(o) for p, o in ps.items()} for t, ps in parsed.items() if isinstance(ps, dict)}


def source_lag(sources: list[Any]) -> tuple[dict[str, int], int]:
    """Per-partition lag (``"topic[p]"``: latest - end) and the partitions planned backwards (end < start).

    Reads the Kafka-style offsets (``{topic: {partition: offset}}``) of each source's progress: its
    ``latestOffset`` (what the source reports as available) against ``endOffset``.
    """
    lag: dict[str, int] = {}
    skipped = 0
    for src in sources:
        start, end = _offsets(src.startOffset), _offsets(src.endOffset)
        latest = _offsets(getattr(src, "latestOffset", None))
        for t, ps in end.items():
            for p, e in ps.items():
                if e < start.get(t, {}).get(p, e):
                    skipped += 1
                if p in latest.get(t, {}):
                    lag[f"{t}[{p}]"] = max(0, latest[t][p] - e)
    return lag, skipped


def source_kind(sources: list[Any]) -> str:
    """``kafka`` when the query reads Spark's JVM Kafka source (described ``KafkaV2[...]``), else ``python``."""
    return "kafka" if any(str(getattr(s, "description", "")).startswith("KafkaV2") for s in sources) else "python"


def source_deltas(sources: list[Any]) -> list[int]:
    """Per-partition offset deltas (end - start) of the batch, one per partition (combiner) in order."""
    deltas: list[int] = []
    for src in sources:
        deltas.extend(partition_deltas(_offsets(src.startOffset), _offsets(src.endOffset)))
    return deltas


def _opt(o: Any) -> Any:
    return o.get() if o.isDefined() else None


def _stage_tasks(spark: SparkSession, stage_id: int) -> list[dict[str, int]]:
    sc = spark.sparkContext
    info = sc.statusTracker().getStageInfo(stage_id)
    attempt = info.currentAttemptId if info is not None else 0
    seq = sc._jsc.sc().statusStore().taskList(stage_id, attempt, 1 << 30)
    out = []
    for i in range(seq.size()):
        t = seq.apply(i)
        m = _opt(t.taskMetrics())
        if m is None or t.status() != "SUCCESS":
            continue
        out.append(
            {
                "index": int(t.index()),
                "run_ms": int(m.executorRunTime()),
                "gc_ms": int(m.jvmGcTime()),
                "records": int(m.inputMetrics().recordsRead()),
                "shuffle_read": int(m.shuffleReadMetrics().recordsRead()),
                "shuffle_written": int(m.shuffleWriteMetrics().recordsWritten()),
            }
        )
    return out


#: how long the listener waits for Spark's status store to hold a finished batch's combiner stage
STATUS_WAIT_S = 10.0


def combiner_stage_stats(spark: SparkSession, job_ids: list[int], wait_s: float = 5.0) -> dict[str, Any] | None:
    """The combiner stage among the stages of ``job_ids``: the one reading no shuffle and writing one.

    Waits up to ``wait_s`` for the status store to hold every task (it is fed asynchronously). Returns the stage
    id, the first of ``job_ids`` that ran it (``job``) and its tasks.
    """
    tracker = spark.sparkContext.statusTracker()
    job_of: dict[int, int] = {}  # stage -> the first job that ran it
    for j in sorted(job_ids):
        info = tracker.getJobInfo(j)
        if info is not None:
            for s in info.stageIds:
                job_of.setdefault(int(s), j)
    deadline = time.monotonic() + wait_s
    best: dict[str, Any] | None = None
    for sid in sorted(job_of):
        sinfo = tracker.getStageInfo(sid)
        if sinfo is None or sinfo.numCompletedTasks == 0:
            continue  # skipped stage (its shuffle output was reused)
        tasks = _stage_tasks(spark, sid)
        while len(tasks) < sinfo.numCompletedTasks and time.monotonic() < deadline:
            time.sleep(0.05)
            tasks = _stage_tasks(spark, sid)
        if tasks and all(t["shuffle_read"] == 0 for t in tasks) and any(t["shuffle_written"] for t in tasks):
            best = {"stage": sid, "job": job_of[sid], "tasks": sorted(tasks, key=lambda t: t["index"])}
            break
    return best


class CombinerMetricsListener(StreamingQueryListener):
    """Collects :class:`BatchStats` for every progress event of the queries it watches."""

    def __init__(
        self,
        spark: SparkSession,
        progress_log: Path | None = None,
        query_names: set[str] | None = None,
        source: str | None = None,
        watermark: str | None = None,
    ):
        """``source``: ``python`` or ``kafka`` (``spark.source``); ``None`` reads it from each progress event.

        ``watermark``: the job's ``spark.watermark`` delay, named in the warning about rows dropped as late.
        """
        if source not in (None, "python", "kafka"):
            raise ValueError(f"source must be 'python', 'kafka' or None (got source={source!r})")
        self._session = spark
        self.source = source
        self.progress_log = progress_log
        self.query_names = query_names
        self.watermark = watermark
        self.stats: list[BatchStats] = []
        self._jobs_done: dict[str, int] = {}  # job group (the query's run id) -> its last job attributed to a batch
        self._lock = threading.Lock()
        self._handled = threading.Condition(self._lock)  # notified after each progress event, recorded or not
        self._last_handled: dict[str, int] = {}  # query -> the last batch id whose progress event was handled
        self._terminated: set[str] = set()  # ids of the queries whose termination event was handled
        if progress_log is not None:
            progress_log.parent.mkdir(parents=True, exist_ok=True)

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to record."""

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to record."""

    def onQueryTerminated(self, event: Any) -> None:
        """Note the query's end (:meth:`wait_terminated`)."""
        with self._handled:
            self._terminated.add(str(event.id))
            self._handled.notify_all()

    def onQueryProgress(self, event: Any) -> None:
        """Record the combiner stage of the batch that just finished (never raises into Spark)."""
        p = event.progress
        try:
            self._record(p)
        except Exception as exc:  # observability must not stop the query
            print(f"skewroute observability: batch metrics unavailable: {exc}")
        finally:
            with self._handled:
                self._last_handled[p.name or str(p.id)] = int(p.batchId)
                self._handled.notify_all()

    def wait_handled(self, query: str, batch_id: int, timeout: float) -> bool:
        """Wait until the progress event of ``query``'s batch ``batch_id`` (or a later one) has been handled.

        Spark delivers progress events to listeners asynchronously: a query that has just ended may still have
        its last event on the way. False when ``timeout`` seconds pass first.
        """
        with self._handled:
            return self._handled.wait_for(lambda: self._last_handled.get(query, -1) >= batch_id, timeout)

    def wait_terminated(self, query_id: str, timeout: float) -> bool:
        """Wait until the termination event of the query with id ``query_id`` has been handled.

        Spark delivers it asynchronously, through the Python callback server: a process that stopped before then
        made Spark log the delivery's failure, a stack trace, on stderr. False when ``timeout`` seconds pass first.
        """
        with self._handled:
            return self._handled.wait_for(lambda: query_id in self._terminated, timeout)

    def _record(self, p: Any) -> None:
        name = p.name or str(p.id)
        if self.query_names is not None and name not in self.query_names:
            return
        stage = self._combiner_stage(p) if p.numInputRows else None
        ops = list(p.stateOperators or [])
        stats = BatchStats(
            query=name,
            batch_id=int(p.batchId),
            timestamp=str(p.timestamp),
            input_rows=int(p.numInputRows),
            batch_ms=int((p.durationMs or {}).get("triggerExecution", 0)),
            processed_rows_per_second=float(p.processedRowsPerSecond or 0.0),
            rows_dropped_by_watermark=sum(int(o.numRowsDroppedByWatermark) for o in ops),
            state_rows=sum(int(o.numRowsTotal) for o in ops),
            groups=sum(int(o.numRowsUpdated) for o in ops if getattr(o, "operatorName", "") == "stateStoreSave"),
            phase_ms={k: int(v) for k, v in (p.durationMs or {}).items()},
        )
        stats.lag, stats.skipped_partitions = source_lag(p.sources or [])
        if stage is not None:
            tasks = stage["tasks"]
            sources = list(p.sources or [])
            attribution = attribute_tasks(
                self.source or source_kind(sources), [t["records"] for t in tasks], source_deltas(sources)
            )
            stats.combiner_task_ms = attribution.reorder([t["run_ms"] for t in tasks])
            stats.combiner_records = attribution.reorder([t["records"] for t in tasks])
            stats.combiner_gc_ms = attribution.reorder([t["gc_ms"] for t in tasks])
            stats.combiner_attribution = attribution.method
            stats.shuffled_partials = sum(t["shuffle_written"] for t in tasks)
            med = statistics.median(stats.combiner_task_ms)
            stats.straggler_ratio = round(max(stats.combiner_task_ms) / med, 3) if med > 0 else None
            med_rec = statistics.median(stats.combiner_records)
            stats.record_ratio = round(max(stats.combiner_records) / med_rec, 3) if med_rec > 0 else None
        self._publish(stats)

    def _combiner_stage(self, p: Any, wait_s: float = STATUS_WAIT_S) -> dict[str, Any] | None:
        """The combiner stage of the batch of progress ``p``, once the status store holds all of it.

        The status store is fed asynchronously, and on a loaded machine it can lag behind the progress event:
        the batch's jobs not yet listed, or its stage not yet complete. So this looks again (jobs included)
        until the stage's tasks have read every input row of the batch, for up to ``wait_s`` seconds, and then
        takes what it has.

        The query's jobs after the last one attributed to a batch are this batch's, and, once the next batch has
        started, some of the next one's too: job ids grow, so the job that ran this batch's combiner stage and
        the jobs before it are this batch's, and only those are marked as attributed. (A lagging status store
        can make this wait long enough for the next batch's jobs to be listed.)
        """
        tracker = self._session.sparkContext.statusTracker()
        deadline = time.monotonic() + wait_s
        group = str(p.runId)
        while True:
            with self._lock:
                done = self._jobs_done.get(group, -1)
            jobs = sorted(j for j in tracker.getJobIdsForGroup(group) if j > done)
            left = deadline - time.monotonic()
            stage = combiner_stage_stats(self._session, jobs, wait_s=max(0.0, left))
            if stage is not None and sum(t["records"] for t in stage["tasks"]) >= int(p.numInputRows):
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        last = int(stage["job"]) if stage is not None else max(jobs, default=done)
        with self._lock:
            self._jobs_done[group] = max(done, last)
        return stage

    def _publish(self, s: BatchStats) -> None:
        with self._lock:
            self.stats.append(s)
            if self.progress_log is not None:
                with self.progress_log.open("a") as f:
                    f.write(s.to_json() + "\n")
        if s.rows_dropped_by_watermark:
            self._warn_dropped(s)
        _ROWS.labels(s.query).set(s.input_rows)
        _LAG.labels(s.query).set(sum(s.lag.values()))
        if s.skipped_partitions:
            _LOSS.labels(s.query).inc(s.skipped_partitions)
        _PARTIALS.labels(s.query).set(s.shuffled_partials)
        if s.straggler_ratio is not None:
            _STRAGGLER.labels(s.query).set(s.straggler_ratio)
        for ms in s.combiner_task_ms:
            _TASK.labels(s.query).observe(ms / 1000)

    @property
    def rows_dropped_by_watermark(self) -> int:
        """Rows dropped as later than the watermark so far, over every batch recorded."""
        with self._lock:
            return RunStats(self.stats).rows_dropped_by_watermark

    def _warn_dropped(self, s: BatchStats) -> None:
        _DROPPED.labels(s.query).inc(s.rows_dropped_by_watermark)
        delay = f" (now {self.watermark})" if self.watermark else ""
        log.warning(
            "skewroute spark: query %s batch %d dropped %d rows later than the watermark (%d so far this run); "
            "they are missing from the results. Raise spark.watermark%s to at least the event-time lateness; "
            "for a routed backlog with several routers, to at least the routers' skew in event time (or route "
            "the backlog with one router)",
            s.query, s.batch_id, s.rows_dropped_by_watermark, self.rows_dropped_by_watermark, delay,
        )  # fmt: skip
