"""The SparkSession of the job: its master, configuration, log level and, on a cluster, the executors' Python.

Built from :class:`~schemas.spark_settings.SparkSettings`; under ``spark-submit`` the submitted master wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from schemas.spark_settings import SparkSettings

__all__ = ["DEFAULT_KAFKA_PACKAGE", "LOG_CONFIG", "build_session", "executor_env_conf", "session_conf"]


def build_session(spark: SparkSettings, app_name: str = "skewroute-spark") -> SparkSession:
    """A SparkSession for the job (``master`` is ignored when spark-submit already set one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit, whose --master wins
        if spark.master.startswith("local"):  # all on this host: bind loopback (no "resolves to loopback" warning)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        b = b.master(spark.master)
        for k, v in executor_env_conf(spark).items():
            b = b.config(k, v)
    for k, v in session_conf(spark).items():
        b = b.config(k, v)
    return b.getOrCreate()


def session_conf(spark: SparkSettings) -> dict[str, str]:
    """The session configuration of ``spark`` (besides the master and the executors' Python).

    ``spark.jars.packages`` (the spark-sql-kafka connector) only for ``source: kafka``: the JVM resolves it at
    launch (Ivy, cached), so a session that should serve the JVM source must be built from such settings.
    ``spark.conf`` comes last and wins.
    """
    conf = {
        "spark.sql.shuffle.partitions": str(spark.shuffle_partitions),
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.ui.showConsoleProgress": "false",  # progress bars garble logs; metrics go to the log
        # Python data source runners are fresh processes; on an overloaded host they take longer than the default
        # 15 s to connect back to the JVM ("Python worker failed to connect back").
        "spark.python.authenticate.socketTimeout": "120s",
    }
    if spark.source == "kafka":
        conf["spark.jars.packages"] = spark.kafka_package or DEFAULT_KAFKA_PACKAGE
    if "spark.driver.extraJavaOptions" not in spark.conf:  # Spark's INFO log, hundreds of lines per run
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}"
    conf["spark.sql.adaptive.enabled"] = "false"  # streaming queries disable it anyway, with a warning each
    return {**conf, **spark.conf}


#: Spark's log configuration for the job's driver (warnings and errors).
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


def executor_env_conf(spark: SparkSettings) -> dict[str, str]:
    """Ship the packed project environment to executors when the master is not local (see ``envpack``).

    Nothing when the master is ``local[...]`` (executors are the driver's threads) or the configuration already
    says how executors get their Python (``spark.archives`` or ``spark.sql.execution.pyspark.python`` in
    ``spark.conf``).
    """
    if spark.master.startswith("local") or {"spark.archives", "spark.sql.execution.pyspark.python"} & set(spark.conf):
        return {}
    from spark_consumers.envpack import executor_python_conf, packed_env

    return executor_python_conf(packed_env().archive)


#: Spark's Kafka connector used by ``spark.source: kafka`` when ``spark.kafka_package`` is unset. Maven Central
#: has no 4.3 build of spark-sql-kafka (4.2.0 is the newest there; BENCHMARKS.md dates it); the 4.2.0 connector runs on
#: Spark 4.3 (the JVM-source tests use it). Set ``spark.kafka_package`` to match your cluster's Spark.
DEFAULT_KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
