"""The example configs in deploy/configs: one per use, each loads, builds its partitioners and its Spark
aggregation, and keeps the windows related as its comments say (router slide = Spark trigger interval)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from router.dataplane import make_partitioner
from schemas.settings import SkewrouteSettings
from spark_consumers.job import agg_spec

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "configs").glob("*.yaml"))
USES = {"counts-per-key", "sums-with-measure", "several-routes", "exactly-once"}
UNITS_MS = {"second": 1_000, "minute": 60_000}


def duration_ms(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?) (second|minute)s?", text)
    assert m, text
    return float(m.group(1)) * UNITS_MS[m.group(2)]


def test_one_config_per_use() -> None:
    assert {c.stem for c in CONFIGS} == USES


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_loads_builds_and_relates_its_windows(path: Path) -> None:
    s = SkewrouteSettings.load(path)
    assert s.routes
    for route in s.routes:
        part = make_partitioner(route)
        ids = part.assign(["a", "b", "a"], [0, 1, 2])
        assert ids.min() >= 0 and ids.max() < route.combiners
        assert route.window.kind == "time"
        assert route.window.slide == duration_ms(s.spark.trigger_interval), route.route_name  # slide = trigger
        assert route.window.size % route.window.slide == 0  # a whole number of slides
    assert s.window_warnings() == []  # so the router does not warn about them
    spec = agg_spec(s.spark)
    assert spec.aggregations and duration_ms(s.spark.window) > 0
    if s.spark.sink == "parquet":
        assert s.spark.output_mode == "append"  # the file sink writes final rows only
    text = path.read_text()
    assert "window.slide" in text and "spark.window" in text  # says how the windows relate
    assert re.search(r"[Ss]wap in|[Aa]lso fine|works with", text)  # and which partitioners fit instead


def test_exactly_once_and_measure_configs_say_what_they_promise() -> None:
    eos = SkewrouteSettings.load(next(c for c in CONFIGS if c.stem == "exactly-once"))
    assert eos.router.delivery == "exactly_once" and eos.spark.isolation_level == "read_committed"
    assert eos.spark.sink == "parquet"  # the Kafka results sink is at-least-once
    sums = SkewrouteSettings.load(next(c for c in CONFIGS if c.stem == "sums-with-measure"))
    assert sums.routes[0].value_field and "sum" in sums.spark.aggregations
    counts = SkewrouteSettings.load(next(c for c in CONFIGS if c.stem == "counts-per-key"))
    assert counts.spark.aggregations == ["count"] and counts.routes[0].value_field is None
    several = SkewrouteSettings.load(next(c for c in CONFIGS if c.stem == "several-routes"))
    assert len({r.partitioner.name for r in several.routes}) == len(several.routes) > 1
