"""Test helpers leave no Kafka client behind: one that outlives its broker logs ``Connect to ... failed`` for
the rest of the run (issue 29, item 11). librdkafka names its threads ``rdk:*``: none may remain."""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest

from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, run_plane, settings, zipf_records

pytestmark = pytest.mark.kafka


def rdkafka_threads() -> int:
    """librdkafka threads of this process."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # the thread ended
            n += Path(f"/proc/self/task/{task}/comm").read_text().startswith("rdk:")
    return n


def test_a_data_plane_whose_wait_fails_is_still_stopped(kafka: KafkaSettings, topic: str) -> None:
    produce(kafka, topic, zipf_records(200))
    gc.collect()
    before = rdkafka_threads()
    with pytest.raises(AssertionError, match="timed out"):
        run_plane(settings(kafka, topic, f"app-{topic}"), expected=10_000, timeout=3)  # never reaches 10,000
    gc.collect()
    assert rdkafka_threads() <= before, "the plane's consumer and producer outlive the test"
