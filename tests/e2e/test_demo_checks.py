"""The demo's checks on hand-made inputs (fast): the exactness check must catch every kind of wrong result."""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.demo.checks import exactness, reference_aggregates
from benchmarks.demo.report import ROWS, render_markdown
from benchmarks.demo.source import T0_MS, build_input

WINDOW_MS = 10_000


def _results(data: Any) -> dict[bytes, dict[str, Any]]:
    """Spark-shaped result rows computed independently of ``reference_aggregates`` (plain loops)."""
    acc: dict[tuple[int, str], list[float]] = {}
    for k, t, x in zip(data.keys.tolist(), data.times.tolist(), data.values.tolist(), strict=True):
        a = acc.setdefault((t - t % WINDOW_MS, k), [0, 0.0, float("inf"), float("-inf")])
        a[0] += 1
        a[1] += x
        a[2], a[3] = min(a[2], x), max(a[3], x)
    return {
        f"{w}|{w + WINDOW_MS}|{k}".encode(): {
            "window_start": w, "window_end": w + WINDOW_MS, "key": k,
            "count": a[0], "sum": a[1], "min": a[2], "max": a[3], "mean": a[1] / a[0],
        }
        for (w, k), a in acc.items()
    }  # fmt: skip


def test_input_is_seeded_and_timed_by_the_rate() -> None:
    a = build_input("zipf:s=1.5,keys=100", 5_000, 1_000, seed=3)
    b = build_input("zipf:s=1.5,keys=100", 5_000, 1_000, seed=3)
    assert len(a) == 5_000 and (a.keys == b.keys).all() and (a.values == b.values).all()
    assert a.times[0] == T0_MS and a.times[-1] == T0_MS + 4_999 and (np.diff(a.times) >= 0).all()
    assert a.values.min() >= 0 and a.values.max() < 1000


def test_exactness_passes_on_correct_results_and_catches_wrong_ones() -> None:
    data = build_input("zipf:s=1.5,keys=200", 30_000, 2_000, seed=1)
    results = _results(data)
    assert len(reference_aggregates(data, WINDOW_MS)) == len(results)
    ok = exactness(data, results, WINDOW_MS)
    assert ok.exact and ok.matching == ok.expected == len(results) and ok.examples == []

    keys = sorted(results)
    results[keys[0]] = {**results[keys[0]], "sum": results[keys[0]]["sum"] + 1}  # one wrong sum
    results[keys[1]] = {**results[keys[1]], "count": results[keys[1]]["count"] - 1}  # one record lost
    del results[keys[2]]  # one (window, key) missing
    results[b"x"] = {**results[keys[3]], "key": "not-in-the-input"}  # one made up
    bad = exactness(data, results, WINDOW_MS)
    assert not bad.exact
    assert (bad.mismatching, bad.missing, bad.extra) == (2, 1, 1)
    assert bad.matching == bad.expected - 3 and len(bad.examples) == 4


def test_markdown_has_a_row_per_reported_number() -> None:
    run: dict[str, dict[str, Any]] = {s: {k: 1.0 for _, s2, k, _ in ROWS if s2 == s} for _, s, _, _ in ROWS}
    run["exactness"]["examples"] = []
    demo = {
        "description": "d", "workload": "w", "records": 10, "rate_label": "1/s", "routers": 2, "combiners": 8,
        "reducers": 4, "spark_master": "local[2]", "window_s": 10, "trigger_s": 2.0, "metric_window_ms": 1000,
        "broker": "b", "finished": "now", "seconds": 1.0, "command": "skewroute demo",
    }  # fmt: skip
    md = render_markdown({"demo": demo, "runs": {"dalton": run, "hash": run}, "verdict": ["v"]})
    for label, *_ in ROWS:
        assert f"| {label} | " in md
