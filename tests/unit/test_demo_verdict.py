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
