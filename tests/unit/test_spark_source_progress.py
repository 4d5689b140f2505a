"""Pure parts of the Spark side: lag and skipped partitions from progress, the results producer's timeouts."""

from __future__ import annotations

import json
from types import SimpleNamespace

from spark_consumers.observability import source_lag
from spark_consumers.sinks import DELIVERY_TIMEOUT_MS, FLUSH_MARGIN_S, flush_wait_s, producer_conf


def _src(start: dict, end: dict, latest: dict | None) -> SimpleNamespace:
    return SimpleNamespace(
        startOffset=json.dumps(start), endOffset=json.dumps(end), latestOffset=json.dumps(latest) if latest else None
    )


def test_lag_per_partition_and_skipped_partitions() -> None:
    src = _src({"t": {"0": 10, "1": 100}}, {"t": {"0": 20, "1": 7}}, {"t": {"0": 50, "1": 7}})
    assert source_lag([src]) == ({"t[0]": 30, "t[1]": 0}, 1)  # partition 1 went backwards (recreated, skipped)
    assert source_lag([_src({"t": {"0": 1}}, {"t": {"0": 2}}, None)]) == ({}, 0)


def test_delivery_timeout_is_below_the_tasks_wait() -> None:
    assert producer_conf({})["message.timeout.ms"] == DELIVERY_TIMEOUT_MS
    assert flush_wait_s({}) == DELIVERY_TIMEOUT_MS / 1000 + FLUSH_MARGIN_S
    conf = producer_conf({"delivery.timeout.ms": 5000})  # librdkafka's alias: one setting, however it is named
    assert conf["message.timeout.ms"] == 5000 and "delivery.timeout.ms" not in conf
    assert flush_wait_s({"message.timeout.ms": 120_000}) == 120 + FLUSH_MARGIN_S


def test_rows_dropped_by_watermark_are_summed_and_warned(caplog) -> None:
    import logging

    from spark_consumers.observability import BatchStats, CombinerMetricsListener, RunStats

    caplog.set_level(logging.WARNING, logger="spark_consumers.observability")
    listener = CombinerMetricsListener(None, None, None, "python", "20 seconds")  # type: ignore[arg-type]
    for batch, dropped in enumerate([0, 3, 0, 4]):
        listener._publish(BatchStats("q", batch, "", 10, 1, 1.0, rows_dropped_by_watermark=dropped))
    assert listener.rows_dropped_by_watermark == 7
    assert RunStats(listener.stats).rows_dropped_by_watermark == 7
    assert RunStats().rows_dropped_by_watermark == 0
    warned = [r for r in caplog.records if r.name == "spark_consumers.observability"]
    assert [r.levelno for r in warned] == [logging.WARNING] * 2  # one line per batch with drops
    first, second = (r.getMessage() for r in warned)
    assert "batch 1 dropped 3 rows later than the watermark (3 so far" in first
    assert "batch 3 dropped 4 rows later than the watermark (7 so far" in second
    assert "spark.watermark (now 20 seconds)" in first and "several routers" in first


def _progress(batch: int, rows: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        name="q", id="id", runId="run", batchId=batch, timestamp="", numInputRows=rows, durationMs={},
        processedRowsPerSecond=0.0, stateOperators=[], sources=[],
    )  # fmt: skip


def test_groups_are_the_aggregations_updated_state_rows() -> None:
    from spark_consumers.observability import CombinerMetricsListener

    def op(name: str, updated: int) -> SimpleNamespace:
        return SimpleNamespace(operatorName=name, numRowsUpdated=updated, numRowsTotal=updated,
                               numRowsDroppedByWatermark=0)  # fmt: skip

    progress = _progress(0)
    progress.stateOperators = [op("dedupe", 5_000), op("stateStoreSave", 1_234)]  # the dedupe counts records
    listener = CombinerMetricsListener(None, None, None, "python")  # type: ignore[arg-type]
    listener.onQueryProgress(SimpleNamespace(progress=progress))
    assert listener.wait_handled("q", 0, timeout=1)
    assert listener.stats[-1].groups == 1_234


def test_stopping_waits_for_the_last_progress_event_delivered_late() -> None:
    import threading

    from spark_consumers.observability import CombinerMetricsListener

    listener = CombinerMetricsListener(None, None, None, "python")  # type: ignore[arg-type]
    listener.onQueryProgress(SimpleNamespace(progress=_progress(0)))
    assert listener.wait_handled("q", 0, timeout=0.01)
    assert not listener.wait_handled("q", 1, timeout=0.05)  # not delivered yet
    late = threading.Timer(0.2, lambda: listener.onQueryProgress(SimpleNamespace(progress=_progress(1))))
    late.start()
    assert listener.wait_handled("q", 1, timeout=10)
    assert [s.batch_id for s in listener.stats] == [0, 1]
    broken = _progress(2, rows=5)
    broken.runId = None  # recording it fails (no Spark here): the event still counts as handled
    listener.onQueryProgress(SimpleNamespace(progress=broken))
    assert listener.wait_handled("q", 2, timeout=0.01)


def test_combiner_stage_is_looked_for_again_while_the_status_store_lags(monkeypatch) -> None:
    import spark_consumers.observability as obs

    looks: list[list[int]] = []
    groups = iter([[], [7], [7, 8]])  # the batch's jobs reach the status store late, one by one

    def stage_of(_spark: object, jobs: list[int], wait_s: float = 0) -> dict | None:
        looks.append(jobs)
        records = {(): None, (7,): [2, 1], (7, 8): [2, 3]}[tuple(jobs)]
        return None if records is None else {"stage": 1, "job": 7, "tasks": [{"records": r} for r in records]}

    tracker = SimpleNamespace(getJobIdsForGroup=lambda _g: next(groups))
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    monkeypatch.setattr(obs, "combiner_stage_stats", stage_of)
    listener = obs.CombinerMetricsListener(spark, None, None, "python")  # type: ignore[arg-type]
    stage = listener._combiner_stage(_progress(0, rows=5), wait_s=10)
    assert looks == [[], [7], [7, 8]]  # until its tasks have read all 5 input rows
    assert stage is not None and [t["records"] for t in stage["tasks"]] == [2, 3]
    groups = iter([[9]] * 100)
    late = {"stage": 2, "job": 9, "tasks": [{"records": 1}]}
    monkeypatch.setattr(obs, "combiner_stage_stats", lambda *_a, **_k: late)
    assert listener._combiner_stage(_progress(1, rows=5), wait_s=0.3) == late


def test_the_next_batchs_jobs_listed_while_a_batch_waits_stay_for_the_next_batch(monkeypatch) -> None:
    import spark_consumers.observability as obs

    # batch 0 ran job 7; the status store lags, so batch 0's second look already lists job 8, batch 1's
    lists = [[], [7, 8], [7, 8, 9]]
    stage_of_job = {7: 100, 8: 101}  # each job's combiner stage (job 9: batch 1's sink, no combiner stage)
    looks: list[list[int]] = []

    def stage_of(_spark: object, jobs: list[int], wait_s: float = 0) -> dict | None:
        looks.append(jobs)
        first = next((j for j in jobs if j in stage_of_job), None)
        return None if first is None else {"stage": stage_of_job[first], "job": first, "tasks": [{"records": 4}]}

    tracker = SimpleNamespace(getJobIdsForGroup=lambda _g: lists.pop(0) if len(lists) > 1 else lists[0])
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    monkeypatch.setattr(obs, "combiner_stage_stats", stage_of)
    listener = obs.CombinerMetricsListener(spark, None, None, "python")  # type: ignore[arg-type]
    first = listener._combiner_stage(_progress(0, rows=4), wait_s=10)
    second = listener._combiner_stage(_progress(1, rows=4), wait_s=0.5)
    assert first is not None and first["stage"] == 100
    assert second is not None and second["stage"] == 101  # job 8 was left to batch 1
    assert looks == [[], [7, 8], [8, 9]]
