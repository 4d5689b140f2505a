"""``deploy/spark-submit.sh`` from another folder, with a relative config: the command it would run.

``SPARK_SUBMIT`` points at a stub that prints its arguments, so no JVM starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from spark_consumers.session import DEFAULT_KAFKA_PACKAGE

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "spark-submit.sh"


def _submit(tmp_path: Path, spark: dict[str, object]) -> list[str]:
    (tmp_path / "my.yaml").write_text(yaml.safe_dump({"routes": [{"raw_topic": "t"}], "spark": spark}))
    stub = tmp_path / "spark-submit"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "cwd=$PWD" "$@"\n')
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKEWROUTE_")}
    env.update(SPARK_SUBMIT=str(stub), PYSPARK_PYTHON=sys.executable)
    res = subprocess.run(["bash", str(SCRIPT), "--config", "my.yaml"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_relative_config_from_another_folder_reaches_the_job(tmp_path: Path) -> None:
    args = _submit(tmp_path, {})
    assert args[args.index("--config") + 1] == str(tmp_path / "my.yaml")
    assert args[0] == f"cwd={tmp_path}"  # the job runs where the user is: the config's relative paths are theirs
    assert "--packages" not in args  # the Python source needs no jar
    java = args[args.index("--driver-java-options") + 1]  # warnings only, not Spark's INFO log
    assert java.startswith("-Dlog4j2.configurationFile=file://") and Path(java.split("file://")[1]).is_file()


def test_kafka_source_uses_the_configured_package_or_the_jobs_default(tmp_path: Path) -> None:
    args = _submit(tmp_path, {"source": "kafka"})
    assert args[args.index("--packages") + 1] == DEFAULT_KAFKA_PACKAGE  # one that exists, as the job uses
    mine = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"
    args = _submit(tmp_path, {"source": "kafka", "kafka_package": mine})
    assert args[args.index("--packages") + 1] == mine
