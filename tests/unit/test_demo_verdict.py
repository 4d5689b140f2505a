"""The demo verdict's end-to-end line: a difference where the run could show one, plainly none otherwise."""

from __future__ import annotations

from typing import Any

from benchmarks.demo.runner import _end_to_end


def _run(records_per_s: float, drain_s: float, produce_s: float = 24.0) -> dict[str, Any]:
    return {"throughput": {"records_per_s": records_per_s, "drain_seconds": drain_s, "produce_seconds": produce_s}}


def test_paced_by_the_input_says_there_is_no_difference() -> None:
    line = _end_to_end(2_500.0, _run(2_220, 4.5), _run(2_252, 6.8), "dalton", "hash")
    assert line.startswith("end-to-end: no difference to show at 2,500 records/s")
    assert "kept up" in line and "e2e-bench" in line and "direct baseline" in line


def test_backlog_states_who_drained_first() -> None:
    line = _end_to_end(0.0, _run(43_000, 3.0, 4.0), _run(52_000, 6.0, 4.0), "dalton", "hash")
    assert line.startswith("end-to-end (full speed: a backlog)")
    assert "dalton drained first (2.00x)" in line


def test_input_outran_a_pipeline() -> None:
    line = _end_to_end(50_000.0, _run(30_000, 40.0), _run(20_000, 80.0), "dalton", "hash")
    assert "the input outran a pipeline" in line and "dalton drained first" in line


def test_a_trailing_handful_of_records_does_not_decide_the_records_spread() -> None:
    """Combiner records max/mean per micro-batch, weighted by records: the demo's last micro-batch of 16 records
    (max/mean 4.5 however they are placed) once made a balanced run read 1.297."""
    from benchmarks.demo.checks import spark_summary
    from spark_consumers.observability import BatchStats

    def batch(i: int, records: list[int]) -> BatchStats:
        return BatchStats("q", i, "t", sum(records), 1000, 0.0, [10] * len(records), records)

    full = [batch(i, [630, 630, 540, 630, 630, 640, 630, 630]) for i in range(12)]
    tail = batch(12, [0, 9, 7, 0, 0, 0, 0, 0])
    got = spark_summary([*full, tail], 8)["record_max_mean"]
    alone = spark_summary(full, 8)["record_max_mean"]
    assert abs(alone - 640 * 8 / 4960) < 1e-12
    assert abs(got - alone) < 0.01  # the 16 records move it by (4.5 - 1.03) * 16 / 59,536
