"""``skewroute soak`` with the poison-pill and hot-key injectors on: nothing lost, every poison pill in the DLQ.

A short run (one worker SIGKILLed and restarted once) of the same code ``skewroute soak`` runs; the figures
come from reading the combiner topic and the DLQ back, by source position.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.soak import SoakOptions, run_soak
from schemas.settings import KafkaSettings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_soak_with_poison_pills_and_a_hot_key(kafka: KafkaSettings, tmp_path: Path) -> None:
    opts = SoakOptions(
        duration_s=24, rate=200, workers=2, partitioner="pkg", kill_every_s=12, restart_after_s=3,
        kill_reducer_every_s=0, drain_s=60, bootstrap=kafka.bootstrap_servers, workdir=tmp_path,
        poison_every=25, skew_at_s=8, skew=0.6,
    )  # fmt: skip
    res = run_soak(opts, say=lambda _: None)
    assert res.kills == 1 and any("skew: 60%" in e for e in res.events)
    assert res.records_in > 2_000 and res.lost == 0 and res.unique_out == res.records_in
    assert res.poison_in >= 150  # every 25th record; the 950 KB one among them
    assert res.poison_dead_lettered == res.poison_in and res.poison_unaccounted == 0 and res.poison_routed == 0
