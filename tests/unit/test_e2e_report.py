"""The e2e-bench report's warm-up and drift-control lines (what lets a reader trust ratios against direct)."""

from __future__ import annotations

from benchmarks.e2e.report import _recheck_lines, _warm_line


def test_warm_line_lists_the_passes_and_whether_they_settled() -> None:
    doc = {"warm_up": {"records": 100_000, "n": 8, "rates": [4_031.0, 9_492.0, 10_500.0], "settled": True,
                       "tolerance": 0.15}}  # fmt: skip
    line = _warm_line(doc)[0]
    assert "100,000 records at n = 8" in line and "4,031, 9,492, 10,500 rec/s" in line
    assert "settled" in line and "not settled" not in line and "within 15%" in line
    doc["warm_up"] |= {"rates": [4_031.0, 9_492.0], "settled": False}
    assert "**not settled**" in _warm_line(doc)[0]
    assert "Warm-up: none" in _warm_line({"warm_up": {"records": 0}})[0]
    assert "Warm-up: none" in _warm_line({})[0]  # a result.json from before the warm-up record


def test_recheck_line_states_the_drift_of_direct() -> None:
    doc = {"rechecks": [{"n": 8, "config": "direct", "first_rate": 10_000.0, "again_rate": 9_000.0, "drift": -0.1,
                         "exact": True},
                        {"n": 2, "config": "direct", "first_rate": 5_000.0, "again_rate": None, "drift": None,
                         "error": "timed out\nmore"}]}  # fmt: skip
    lines = _recheck_lines(doc, 8)
    assert lines[0] == "" and "9,000 rec/s (first 10,000, drift -10%)" in lines[1]
    assert "failed (timed out" in _recheck_lines(doc, 2)[1]
    assert _recheck_lines(doc, 4) == [] and _recheck_lines({}, 8) == []
