"""router-bench's release section: figures per configuration and the JSON they are written as (no broker)."""

from __future__ import annotations

import argparse
import json
import math

from benchmarks.router_bench import _no_nan
from benchmarks.router_bench_report import BASELINE, NEW, figures, release_table


def _run(rate: float, cpu_s: float, routed: float = math.nan, broker: float = 0.3) -> dict[str, object]:
    return {"ok": True, "rate": rate, "cpu_s": cpu_s, "consumed": 100_000, "broker_cpu_s": broker,
            "routed_bytes_per_record": routed}  # fmt: skip


def test_figures_are_medians_and_fall_back_to_computed_bytes() -> None:
    runs = [_run(100.0, 0.4, 44.0), _run(300.0, 0.5, 44.0), _run(200.0, 0.3, 44.0), {"ok": False, "error": "x"}]
    f = figures(runs, 22.0, 136.0)
    assert (f["runs"], f["tuples_per_s"], f["tuples_per_s_best"]) == (3, 200.0, 300.0)
    assert math.isclose(f["cpu_us_per_record"], 4.0) and math.isclose(f["broker_cpu_us_per_record"], 3.0)
    assert (f["routed_bytes_per_record"], f["routed_bytes_measured"], f["raw_bytes_per_record"]) == (44.0, True, 22.0)
    old = figures([_run(100.0, 0.5)], 22.0, 136.0)  # the baseline's child does not read its topic back
    assert (old["routed_bytes_per_record"], old["routed_bytes_measured"]) == (136.0, False)
    assert figures([{"ok": False, "error": "boom"}], 1.0, 1.0) == {"ok": False, "error": "boom"}


def test_release_table_puts_variants_side_by_side_and_json_has_no_nan() -> None:
    args = argparse.Namespace(formats="1,2", baseline="old", rounds=1, in_flight="")
    per = {"zipf1.5": {("hash", (NEW, 1, None)): [_run(80.0, 0.5, 136.0)],
                       ("hash", (NEW, 2, None)): [_run(160.0, 0.35, 44.0)],
                       ("hash", (BASELINE, 1, None)): [_run(80.0, 0.5, broker=math.nan)]}}  # fmt: skip
    lines, entries = release_table(args, per, {"zipf1.5": (22.0, 136.0)}, ["hash"])
    row = next(ln for ln in lines if ln.startswith("| hash"))
    assert row.rstrip().endswith("| 2.00 |")  # new format 2 / baseline
    # the baseline runs with its own default format: null
    assert [(e["release"], e["routed_format"]) for e in entries] == [(NEW, 1), (NEW, 2), (BASELINE, None)]
    doc = json.loads(json.dumps(_no_nan({"configurations": entries}), allow_nan=False))
    assert doc["configurations"][2]["broker_cpu_us_per_record"] is None


def test_release_table_compares_max_in_flight_values_with_the_first() -> None:
    args = argparse.Namespace(formats="2", baseline=None, rounds=1, in_flight="1,4")
    per = {
        "uniform": {("hash", (NEW, 2, 1)): [_run(100.0, 0.5, 44.0)], ("hash", (NEW, 2, 4)): [_run(150.0, 0.4, 44.0)]}
    }
    lines, entries = release_table(args, per, {"uniform": (22.0, 136.0)}, ["hash"])
    head = next(ln for ln in lines if ln.startswith("| configuration"))
    assert "new (format 2, in flight 4) / new (format 2, in flight 1): tuples/s, CPU µs/rec" in head
    row = next(ln for ln in lines if ln.startswith("| hash"))
    assert row.rstrip().endswith("| 1.50, 0.80 |")
    assert [(e["max_in_flight"], e["tuples_per_s"]) for e in entries] == [(1, 100.0), (4, 150.0)]
