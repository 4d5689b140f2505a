"""``skewroute demo --cluster``: the whole demo with Spark on a local standalone cluster (2 worker JVMs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark, pytest.mark.extended]


def test_demo_on_the_standalone_cluster_is_exact(tmp_path) -> None:
    out = tmp_path / "report"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [sys.executable, "-c", "from router.cli import main; main()", "demo", "--quick", "--cluster",
           "--records", "8000", "--out", str(out), "--no-live"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    doc = json.loads((out / "report.json").read_text())
    assert doc["demo"]["spark_master"].startswith("spark://127.0.0.1:")
    assert all(r["exactness"]["exact"] for r in doc["runs"].values())
    work = out / "spark-cluster" / "work"
    assert all(list((work / f"worker-{i}").glob("app-*/*/environment")) for i in (0, 1))  # both workers ran it
    assert not (out / "spark-cluster" / "cluster.json").exists()  # stopped
