"""The JVM Kafka source's rows in ``skewroute spark-bench`` and ``skewroute e2e-bench``, run for real and exact.

Both commands run in their own process (the connector package must be on the Spark JVM's class path at launch,
which the test session's shared Spark cannot change) against the session's Apache Kafka: Tansu's high watermark
is one producer batch short, and Spark's JVM source stops there. The connector comes from Ivy's cache after the
first resolution. Each test starts a Spark JVM with the package and runs both sources, so together they take
minutes on the shared 2-core machine: ``extended``. Their wiring (which session gets the package, which reader
a configuration uses) is unit-tested in ``tests/unit/test_jvm_source_wiring.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.spark.bench import _stream
from connectors.apache_kafka import ApacheKafkaCluster
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings
from tests.integration.spark_support import Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.extended]

RECORDS = 4_000


def _cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [sys.executable, "-c", "from router.cli import main; main()", *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_spark_bench_jvm_row_beside_python_row_exact(apache_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    before = set(make_admin(kafka).list_topics(timeout=10).topics)
    _cli("spark-bench", "--bootstrap", apache_kafka.bootstrap, "--sources", "python,kafka", "-p", "hash",
         "--records", str(RECORDS), "--batch", "1000", "-n", "4", "--warmup", "0", "--out", str(tmp_path))  # fmt: skip
    md = (tmp_path / "spark-bench.md").read_text()
    for source in ("python", "kafka"):  # both rows, every record read, no error
        assert f"| hash | {source} | {RECORDS:,} |" in md, md
    assert "Errors:" not in md and "ERROR" not in md
    results = sorted(set(make_admin(kafka).list_topics(timeout=10).topics) - before)
    by_source = {t.rsplit("-", 1)[1]: t for t in results if ".results-" in t}
    assert set(by_source) == {"python", "kafka"}, results
    keys, times, measures = _stream(RECORDS, 10_000, 1.5, 1)  # the command's seeded stream (defaults)
    want = reference([Rec(k, t, x) for k, t, x in zip(keys, times, measures, strict=True)], 10_000, 10_000)
    for topic in by_source.values():  # the same exact aggregates from both sources
        assert_same(read_results(kafka, topic), want)


def test_e2e_bench_jvm_configurations_exact(apache_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    configs = ("direct", "direct-jvm", "dalton-jvm")
    out = tmp_path / "report"
    _cli("e2e-bench", "--quick", "--bootstrap", apache_kafka.bootstrap, "--configs", ",".join(configs), "--out",
         str(out), timeout=1800)  # fmt: skip
    doc = json.loads((out / "result.json").read_text())
    runs = doc["runs"]
    assert [(r["config"], r["phase"]) for r in runs] == [(c, p) for p in ("backlog", "rate") for c in configs]
    for r in runs:
        where = f"{r['config']}/{r['phase']}"
        assert "error" not in r, (where, r.get("error"))
        assert r["exactness"]["exact"], (where, r["exactness"]["examples"])
        assert r["exactness"]["matching"] == r["exactness"]["expected"] > 0
        assert r["spark"]["records"] == r["records"]  # every record read once
    dalton = next(r for r in runs if r["config"] == "dalton-jvm" and r["phase"] == "backlog")
    assert dalton["routed"] >= dalton["records"]  # routed by the workers, then read by the JVM source
    goal = next(g for g in doc["goals"] if "direct-jvm drain / direct drain" in g["goal"])
    assert goal["value"] > 0 and goal["target"] == ">= 2"
    md = (out / "report.md").read_text()
    for c in configs:
        assert f"| {c} |" in md
