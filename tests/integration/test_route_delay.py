"""The router-delay benchmark: every live record is matched with the one it was routed from, and timed."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.route_delay import measure, render
from connectors.broker import EmbeddedBroker
from schemas.settings import KafkaSettings

pytestmark = pytest.mark.kafka


def test_every_routed_record_is_matched_and_timed(broker: EmbeddedBroker, tmp_path: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap)
    row = measure(
        kafka, tmp_path, 500, 1, rate=2_000.0, seconds=3.0, routers=1, partitioner="hash", quiet=True, warmup_s=1.0
    )
    assert row.produced == row.routed == 8_000  # every raw record routed once
    assert 0 < row.counted < row.routed  # each found by its source position; the first second's not counted
    assert 0 <= row.p50 <= row.p90 <= row.p99 <= row.max < 30_000
    opts = argparse.Namespace(
        routers=1, partitioner="hash", rate=2_000.0, seconds=3.0, warmup=1.0, quiet_partition=True, rounds=1
    )
    assert f"| 1 | 500 | 8,000 | 8,000 | {row.counted:,} | {row.p50:.0f} |" in render([row], opts)
