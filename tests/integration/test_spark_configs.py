"""Every shipped config's Spark job builds (settings + plan + sink checked), and one really starts and runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.spark.feed import produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from schemas.settings import SkewrouteSettings
from spark_consumers.job import build_writer, start_job
from tests.integration.spark_support import T0

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "configs").glob("*.yaml"))
#: The first shipped config with a file sink (its output is checked below).
PARQUET = next(p for p in CONFIGS if SkewrouteSettings.load(p).spark.sink == "parquet")


def _local(path: Path, tmp_path: Path, **top: object) -> SkewrouteSettings:
    where = {"checkpoint_dir": str(tmp_path / "ck"), "output_path": str(tmp_path / "out")}
    return SkewrouteSettings.load(path, spark=where, **top)  # merged over the file


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_config_builds_its_spark_job(spark, path: Path, tmp_path: Path) -> None:
    settings = _local(path, tmp_path)
    writer, name = build_writer(spark, settings)
    assert name == f"skewroute_{settings.routes[0].route_name}" and writer is not None


@pytest.mark.slow
def test_shipped_config_job_starts_and_reads(spark, kafka, topic: str, tmp_path: Path) -> None:
    shipped = SkewrouteSettings.load(PARQUET).routes[0].model_dump(mode="json", exclude_none=True)
    settings = _local(PARQUET, tmp_path, kafka=kafka.model_dump(), routes=[{**shipped, "raw_topic": topic}])
    route = settings.routes[0]
    ensure_topics(make_admin(kafka), [TopicSpec(route.combiner_topic_name, route.combiners, exact=True)])
    n = 400
    produce_routed(
        kafka,
        route.combiner_topic_name,
        [f"u{i % 7}" for i in range(n)],
        [T0 + 50 * i for i in range(n)],
        [1.0] * n,
        [i % route.combiners for i in range(n)],
    )
    handle = start_job(spark, settings)  # append: a running job (--once is refused, see check_bounded_run)
    try:
        handle.query.processAllAvailable()
    finally:
        handle.stop()
    assert handle.query.exception() is None
    assert sum(s.input_rows for s in handle.stats) == n
    written = list((tmp_path / "out" / topic).glob("*.parquet"))
    assert written  # append mode: the windows the watermark closed (all but the last ones)
