"""Shared fixtures: the embedded broker (one per test session, started on a free loopback port)."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from connectors.broker import EmbeddedBroker, free_port
from schemas.settings import KafkaSettings

_counter = itertools.count()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """A Tansu broker for the whole session; started here, never assumed to exist."""
    b = EmbeddedBroker(free_port(), state_dir=tmp_path_factory.mktemp("broker")).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def kafka(broker: EmbeddedBroker) -> KafkaSettings:
    """Connection settings for the session broker."""
    return KafkaSettings(bootstrap_servers=broker.bootstrap)


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
    from schemas.settings import SparkSettings
    from spark_consumers.job import build_session

    conf = {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false", "spark.default.parallelism": "2"}
    session = build_session(SparkSettings(master="local[2]", shuffle_partitions=2, conf=conf), "skewroute-tests")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
