"""Shared fixtures: the brokers (one per test session each, started on free loopback ports when first asked for).

``kafka`` is the connection to the embedded Tansu broker; a test marked ``both_brokers`` is parametrised and runs
once on Tansu and once on Apache Kafka (the ``kafka`` param carries the ``apache_kafka`` marker, so
``-m "not apache_kafka"`` leaves it out). Tests of Apache-Kafka-only guarantees use ``apache_kafka`` directly.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from connectors.apache_kafka import ApacheKafkaCluster
from connectors.broker import EmbeddedBroker, free_port
from schemas.settings import KafkaSettings

_counter = itertools.count()


def stop_spark_clients() -> None:
    """Stop the session's Spark, if one runs, before a session broker stops.

    Spark's Python workers keep pooled Kafka clients (the results sink's producers, the Python source's
    consumers) until Spark stops; a broker stopped first leaves them reconnecting, one ``Connect to ... failed``
    line per client and backoff, for as long as the rest of the session takes. Session fixtures are torn down
    in reverse order of set-up, so a broker first asked for after ``spark`` would stop first.
    """
    import sys

    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is not None:
            sc.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A Tansu broker for the whole session; started here, never assumed to exist."""
    b = EmbeddedBroker(free_port(), state_dir=tmp_path_factory.mktemp("broker")).start()
    try:
        yield b
    finally:
        stop_spark_clients()
        b.stop()


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafkaCluster]:
    """A one-node Apache Kafka (KRaft) for the whole session, started only when a test asks for it."""
    c = ApacheKafkaCluster(port=free_port(), state_dir=tmp_path_factory.mktemp("apache-kafka")).start()
    try:
        yield c
    finally:
        stop_spark_clients()
        c.stop(timeout=10)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_brokers`` run on Tansu and on Apache Kafka; all others on Tansu only."""
    if "broker_kind" in metafunc.fixturenames and metafunc.definition.get_closest_marker("both_brokers"):
        kinds = ["tansu", pytest.param("kafka", marks=pytest.mark.apache_kafka)]
        metafunc.parametrize("broker_kind", kinds, indirect=True)


@pytest.fixture
def broker_kind(request: pytest.FixtureRequest) -> str:
    """``tansu`` (the default) or ``kafka`` (Apache Kafka) for tests marked ``both_brokers``."""
    return str(getattr(request, "param", "tansu"))


@pytest.fixture
def kafka(request: pytest.FixtureRequest, broker_kind: str) -> KafkaSettings:
    """Connection settings for the session broker of this test's kind."""
    if broker_kind == "kafka":
        return KafkaSettings(bootstrap_servers=request.getfixturevalue("apache_kafka").bootstrap)
    return KafkaSettings(bootstrap_servers=request.getfixturevalue("broker").bootstrap)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name per test (the in-memory broker keeps every topic until it stops)."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:60].strip("-")
    return f"t-{base}-{os.getpid()}-{next(_counter)}"


# ---- Spark consumers (issue 7): one local SparkSession for every test marked `spark` --------------------------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession (UI off, 2 shuffle partitions) shared by the whole session; stopped at the end."""
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from schemas.spark_settings import SparkSettings
    from spark_consumers.session import build_session

    conf = {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false", "spark.default.parallelism": "2"}
    session = build_session(SparkSettings(master="local[2]", shuffle_partitions=2, conf=conf), "skewroute-tests")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
