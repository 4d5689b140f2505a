"""Wiring of the JVM Kafka source into the benchmarks: which sessions get the connector package, which reader.

The runs themselves (a Spark JVM with the package, Apache Kafka) are in
``tests/integration/test_jvm_source_benches.py`` (extended: JVM start-up and Ivy take minutes here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.e2e import query
from benchmarks.e2e.plan import DIRECT, JVM, ROUTED, E2EOptions, RunSpec, base_config, config_doc, session_config
from benchmarks.spark.bench import parse_sources, session_spark
from router.cli import app
from schemas.settings import SparkSettings
from spark_consumers.session import DEFAULT_KAFKA_PACKAGE, session_conf
from tests.unit.test_spark_options import _Reader  # the recording fake of spark.readStream

PKG = "org.apache.spark:spark-sql-kafka-0-10_2.13:9.9.9"


def test_session_gets_the_connector_package_only_for_the_jvm_source() -> None:
    assert "spark.jars.packages" not in session_conf(SparkSettings())
    assert session_conf(SparkSettings(source="kafka"))["spark.jars.packages"] == DEFAULT_KAFKA_PACKAGE
    assert session_conf(SparkSettings(source="kafka", kafka_package=PKG))["spark.jars.packages"] == PKG
    # spark.conf wins over the computed entries
    assert (
        session_conf(SparkSettings(conf={"spark.sql.shuffle.partitions": "7"}))["spark.sql.shuffle.partitions"] == "7"
    )


def test_spark_bench_session_is_jvm_only_when_a_kafka_row_is_asked_for() -> None:
    base = SparkSettings()
    assert session_spark(base, ("python",), PKG) is base
    both = session_spark(base, ("python", "kafka"), PKG)
    assert both.source == "kafka" and session_conf(both)["spark.jars.packages"] == PKG
    assert session_conf(session_spark(base, ("kafka",), None))["spark.jars.packages"] == DEFAULT_KAFKA_PACKAGE
    assert parse_sources("python, kafka,python") == ("python", "kafka")
    for bad in ("", "jvm", "python,spark"):
        with pytest.raises(ValueError, match="sources must be"):
            parse_sources(bad)


def test_e2e_jvm_configurations_mirror_the_python_ones(tmp_path: Path) -> None:
    assert tuple(f"{c}-jvm" for c in DIRECT + ROUTED) == JVM
    assert session_config(("direct", "dalton")) == "direct"
    assert session_config(("direct", "dalton-jvm")) == "direct-jvm"
    opts = E2EOptions(kafka_package=PKG)
    for config, routed, part in (("dalton-jvm", True, "dalton"), ("direct-split-jvm", False, "hash")):
        spec = RunSpec(config, 4, "backlog", "p", tmp_path / config, "127.0.0.1:1", opts)
        doc = config_doc(spec)
        assert (spec.jvm, spec.routed, base_config(config)) == (True, routed, config.removesuffix("-jvm"))
        assert doc["routes"][0]["partitioner"]["name"] == part
        assert (doc["spark"]["source"], doc["spark"]["kafka_package"]) == ("kafka", PKG)
        settings = spec.settings()  # validated by the settings models
        assert session_conf(settings.spark)["spark.jars.packages"] == PKG
    plain = RunSpec("dalton", 4, "backlog", "p", tmp_path / "d", "127.0.0.1:1", opts)
    assert not plain.jvm and config_doc(plain)["spark"]["source"] == "python"


class _Spark:
    def __init__(self) -> None:
        self.readStream = _Reader()

    class dataSource:  # noqa: N801 - mirrors SparkSession.dataSource
        @staticmethod
        def register(_cls: Any) -> None:
            return None


@pytest.mark.parametrize("config", ["direct-split", "direct-split-jvm"])
def test_e2e_reader_is_spark_kafka_for_jvm_configs(config: str, tmp_path: Path) -> None:
    spec = RunSpec(config, 4, "backlog", "p", tmp_path, "127.0.0.1:9", E2EOptions(batch=500))
    spark = _Spark()
    query._read(spark, spec.settings(), 16)  # type: ignore[arg-type]
    r = spark.readStream
    assert r.opts["subscribe"] == spec.read_topic and r.opts["minPartitions"] == "16"
    if spec.jvm:
        assert r.fmt == "kafka"
        assert r.opts["kafka.bootstrap.servers"] == "127.0.0.1:9" and r.opts["maxOffsetsPerTrigger"] == "500"
        assert "decode" not in r.opts and r.opts["kafka.fetch.max.wait.ms"] == "20"
    else:
        assert r.fmt == "skewroute-kafka" and r.opts["decode"] == "routed"


def test_e2e_command_refuses_jvm_configs_on_tansu_and_unknown_configs() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["e2e-bench", "--configs", "direct,direct-jvm"], terminal_width=200)
    assert res.exit_code == 2 and "--broker kafka" in res.output
    res = runner.invoke(app, ["e2e-bench", "--configs", "direct-gpu"], terminal_width=200)
    assert res.exit_code == 2 and "unknown" in res.output
    res = runner.invoke(app, ["spark-bench", "--sources", "python,jvm"], terminal_width=200)
    assert res.exit_code == 2 and "sources must be" in res.output


def test_source_bench_refuses_unknown_modes() -> None:
    res = CliRunner().invoke(app, ["source-bench", "--modes", "job,parse"], terminal_width=200)
    assert res.exit_code == 2 and "--modes" in res.output and "job, source, read" in res.output
