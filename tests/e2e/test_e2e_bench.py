"""``skewroute e2e-bench --quick --profile heavy``: every configuration runs end to end, exact, with every field.

The full configuration list (three direct baselines, six routed partitioners, backlog and rate phases) takes
minutes, so it is ``extended`` (direct-repartition's extra shuffle and the direct-split baseline are checked there);
the default run keeps direct and Dalton, the pair the drain targets compare, on the heavy profile, with the model
check on ``local[1]``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.e2e.plan import DIRECT, ROUTED

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark]

RUN_FIELDS = {"config", "n", "phase", "records", "spark", "spark_wall_s", "spark_cpu_s", "exactness",
              "router_cpu_s_per_million", "spark_cpu_us_per_record", "total_cpu_us_per_record", "spark_cpu",
              "router_cpu"}  # fmt: skip
SPARK_FIELDS = {"records", "batches", "steady_rate", "overall_rate", "batch_ms", "shuffled_partials",
                "shuffled_all_stages", "straggler_median", "straggler_mean", "record_ratio_mean",
                "combiner_stage_ms", "makespan_ms", "task_ms", "task_records", "per_batch", "batch_makespan_ms",
                "stage_task_ms", "model", "breakdown"}  # fmt: skip
SLOTS = {"C2", "C8", "C32", "C128"}
LATENCY_FIELDS = {"rate", "counted", "p50", "p95", "p99", "series"}


def _run(out: Path, configs: tuple[str, ...]) -> dict[str, Any]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [sys.executable, "-c", "from router.cli import main; main()", "e2e-bench", "--quick", "--profile", "heavy",
           "--configs", ",".join(configs), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"e2e-bench failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads((out / "result.json").read_text())


def _check(doc: dict[str, Any], out: Path, configs: tuple[str, ...]) -> None:
    runs = doc["runs"]
    assert [(r["config"], r["phase"]) for r in runs] == [(c, "backlog") for c in configs] + [
        (c, "rate") for c in configs
    ]
    for r in runs:
        where = f"{r['config']}/{r['phase']}"
        assert set(r) >= RUN_FIELDS, (where, RUN_FIELDS - set(r))
        assert set(r["spark"]) >= SPARK_FIELDS, (where, SPARK_FIELDS - set(r["spark"]))
        assert set(r["spark"]["makespan_ms"]) == SLOTS
        assert set(r["spark"]["batch_makespan_ms"]) == SLOTS
        assert all(len(v) == r["spark"]["batches"] for v in r["spark"]["batch_makespan_ms"].values())
        # exact against a direct computation of count/sum/min/max/mean per (window, key) of the produced input,
        # the score sums exact and the percentiles within percentile_approx's rank error
        assert r["exactness"]["exact"], (where, r["exactness"]["examples"])
        assert r["exactness"]["matching"] == r["exactness"]["expected"] > 0
        assert r["exactness"]["heavy"]["checked"] == r["exactness"]["expected"]
        assert r["spark_cpu"]["seconds"] == r["spark_cpu_s"] > 0
        # every micro-batch's stages were found, so the drain is modelled on every C (and on C = n)
        assert all(st for st in r["spark"]["stage_task_ms"]), where
        assert set(r["spark"]["model"]) == SLOTS | {f"C{r['n']}"}
        assert all(m["rate"] > 0 for m in r["spark"]["model"].values()), where
        assert r["spark"]["breakdown"]["batch_us"] > 0
        assert r["spark"]["records"] == r["records"]  # every record read once by Spark
        assert r["spark"]["shuffled_partials"] > 0 and r["spark_cpu_s"] > 0
        if r["config"] in ROUTED:
            assert r["routed"] >= r["records"] and r["router_cpu_s_per_million"] > 0
            assert r["router_cpu"]["us_per_record"] == r["router_cpu_s_per_million"]
        if r["config"] == "direct-repartition":  # every record crosses the extra shuffle, then the partials
            assert r["spark"]["shuffled_all_stages"] > r["records"]
        if r["phase"] == "rate":
            lat = r["latency"]
            assert set(lat) >= LATENCY_FIELDS
            assert lat["counted"] == r["records"]  # every record's latency was found in the results topic
            assert 0 < lat["p50"] <= lat["p95"] <= lat["p99"] < 600
    assert {g["goal"].split(":")[0] for g in doc["goals"]} == {f"n={r['n']}" for r in runs}
    # the warm-up pass ran (unreported) and direct was measured again after the others (the drift control)
    assert len(doc["warm_up"]["rates"]) == 1 and doc["warm_up"]["rates"][0] > 0
    # then one unreported pass of every other configuration, so none is measured with a cold plan
    assert set(doc["warm_up"]["configs"]) == {c for c in configs if c != "direct"}
    assert all(rate > 0 for rate in doc["warm_up"]["configs"].values())
    if "direct" in configs:
        (again,) = doc["rechecks"]
        assert again["exact"], again
        assert again["again_rate"] > 0 and again["drift"] is not None
    assert doc["machine"]["cores"] and len(doc["machine"]["load_start"]) == 3
    # the model check: the same drain on local[1] predicts the local[2] micro-batches
    check = doc["model_check"]
    assert check["master"] == "local[1]" and check["n"] == 4
    assert [c["config"] for c in check["configs"]] == [c for c in ("direct", "direct-split", "dalton") if c in configs]
    # its warm-up passes: the configurations it drains, no other
    assert set(check["warm_up"]["configs"]) == {c["config"] for c in check["configs"]} - {"direct"}
    for c in check["configs"]:
        assert c["exact"] and c["error"]["total"] is not None and c["predicted_rate"] > 0, c
    assert doc["model_error"] == max(abs(c["error"]["total"]) for c in check["configs"])
    assert doc["options"]["profile"] == "heavy" and "score" in doc["aggregations"]
    markdown = (out / "report.md").read_text()
    assert "Warm-up (unreported): direct backlog passes of 1,000 records" in markdown
    assert "Direct measured again after the others:" in markdown
    assert "## The model, checked" in markdown and "## Verdict" in markdown and "pandas UDFs" in markdown
    for c in configs:
        assert f"| {c} |" in markdown
    for png in ("latency.png", "tasks.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_direct_and_routed(tmp_path: Path) -> None:
    configs = ("direct", "dalton")
    _check(_run(tmp_path / "report", configs), tmp_path / "report", configs)


@pytest.mark.extended
def test_quick_every_configuration(tmp_path: Path) -> None:
    configs = DIRECT + ROUTED
    _check(_run(tmp_path / "report", configs), tmp_path / "report", configs)
