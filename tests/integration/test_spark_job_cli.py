"""``skewroute spark-job`` as a user runs it: each failure is one line naming the thing and the fix, config
errors exit 2 as in every command, and a ``--once`` run prints results, not Spark's INFO log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.spark.feed import produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings
from tests.integration.spark_support import T0

pytestmark = [pytest.mark.kafka]

SKEWROUTE = str(Path(sys.executable).with_name("skewroute"))


def _config(tmp_path: Path, bootstrap: str, topic: str, **spark: object) -> Path:
    path = tmp_path / "skewroute.yaml"
    where = {"checkpoint_dir": str(tmp_path / "ck"), "progress_log": str(tmp_path / "progress.jsonl")}
    cfg = {
        "kafka": {"bootstrap_servers": bootstrap},
        "routes": [{"raw_topic": topic, "combiners": 2}],
        "spark": {**where, "shuffle_partitions": 2, **spark},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run([SKEWROUTE, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _lines(res: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]


def test_missing_combiner_topic_is_one_line_exit_4(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    res = _run("spark-job", "--config", str(_config(tmp_path, kafka.bootstrap_servers, topic)), "--once")
    lines = _lines(res)
    assert res.returncode == 4, lines
    assert len(lines) == 1 and f"{topic}.combiners" in lines[0] and "skewroute router" in lines[0], lines


def test_unreachable_broker_is_one_line_exit_3(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    res = _run("spark-job", "--config", str(_config(tmp_path, bootstrap, "t")), "--once", "--broker-wait", "1")
    lines = _lines(res)
    assert res.returncode == 3, lines
    assert len(lines) == 1 and bootstrap in lines[0] and "results" not in lines[0], lines


def test_config_error_exits_2_like_every_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("spark: {window: 3}\nrouter: {web_port: 0}\n")
    codes = {cmd: _run(cmd, "--config", str(bad)).returncode for cmd in ("spark-job", "router")}
    assert codes == {"spark-job": 2, "router": 2}


@pytest.mark.spark
def test_once_prints_results_not_spark_info_logs(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    config = _config(tmp_path, kafka.bootstrap_servers, topic)
    combiners = f"{topic}.combiners"
    ensure_topics(make_admin(kafka), [TopicSpec(combiners, 2, exact=True)])
    n = 200
    produce_routed(kafka, combiners, [f"k{i % 5}" for i in range(n)], [T0 + 100 * i for i in range(n)],
                   [1.0] * n, [i % 2 for i in range(n)])  # fmt: skip
    res = _run("spark-job", "--config", str(config), "--once")
    lines = _lines(res)
    assert res.returncode == 0, "\n".join(lines[-30:])
    assert f"{n} records in" in res.stdout
    assert "micro-batches, 0 dropped as later than the watermark" in res.stdout  # nothing late: reported as 0
    noise = [ln for ln in lines if " INFO " in ln or " WARN " in ln or "Warning" in ln or "log4j" in ln]
    noise = [ln for ln in noise if "Disabling AQE" not in ln]  # Spark's one notice per stateful query
    assert not noise, "\n".join(noise)  # Spark's INFO log, start-up notices, PySpark's pandas warning (item 8)
    assert len(lines) < 20, "\n".join(lines)
