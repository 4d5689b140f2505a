"""Two ``skewroute router`` processes with a Dalton route sync over the control topic; SIGTERM leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.topic_reader import read_topic
from connectors.admin import partition_count
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.control import GlobalMessage, SyncMessage, parse_control
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, wait_for, zipf_records

pytestmark = pytest.mark.kafka

BIN = Path(sys.executable).parent


def _control(kafka: KafkaSettings, topic: str) -> list[SyncMessage | GlobalMessage]:
    # while the workers run the topic never goes idle: bound the read by time
    return [parse_control(r.value) for r in read_topic(kafka, topic, idle_s=1.0, timeout_s=3.0)]


def test_router_workers_sync_and_leave(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    produce(kafka, topic, zipf_records(30_000, seed=7))
    control = f"{topic}.control"
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    for name in ("wa", "wb"):
        cfg = {
            "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
            "router": {
                "app_id": f"app-{topic}",
                "instance_id": name,
                "state_dir": str(tmp_path / name),
                "control_topic": control,
                "dsync_ms": 200,
                "log_format": "json",
            },  # fmt: skip
            "routes": [{"raw_topic": topic, "combiners": 4, "partitioner": {"name": "dalton"}}],
        }
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(cfg))
        log = tmp_path / f"{name}.log"
        env = {**os.environ, "SKEWROUTE_CONFIG": str(config)}
        with open(log, "ab") as f:
            cmd = [str(BIN / "skewroute"), "router", "--web-port", str(free_port())]
            procs.append((subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tmp_path), log))
    try:

        def rounds_with_both() -> bool:
            msgs = _control(kafka, control)
            return sum(1 for m in msgs if isinstance(m, GlobalMessage) and m.members == ["wa", "wb"]) >= 5

        # asking for a missing topic's metadata would make Tansu create it (4 partitions): wait for the workers'
        wait_for(lambda: partition_count(make_admin(kafka), control) == 1, 60, "the workers' control topic")
        wait_for(rounds_with_both, 60, "five rounds with both workers")
    finally:
        for proc, _ in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, log in procs:
            try:
                rc = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError("worker did not stop:\n" + log.read_text()[-3000:]) from None
            assert rc == 0, log.read_text()[-3000:]
    msgs = _control(kafka, control)
    globals_ = [m for m in msgs if isinstance(m, GlobalMessage)]
    both = [i for i, m in enumerate(msgs) if isinstance(m, GlobalMessage) and m.members == ["wa", "wb"]]
    assert any(msgs[i].reducer == "wa" for i in both)  # the lowest id reduces
    # wb closes such a round only once wa has left (its leaving SYNC is in the round), or after deposing wa for
    # holding a round past the takeover timeout (a starved process on a loaded host: by design)
    wa_left = next(i for i, m in enumerate(msgs) if isinstance(m, SyncMessage) and m.leaving and m.instance == "wa")
    early = [msgs[i].round for i in both if msgs[i].reducer == "wb" and i < wa_left]
    deposed = "deposing it" in (tmp_path / "wb.log").read_text()
    assert not early or deposed, f"wb reduced rounds {early} with wa live and not deposed"
    rounds = [g.round for g in globals_]
    assert rounds == sorted(rounds)
    assert {m.instance for m in msgs if isinstance(m, SyncMessage) and m.leaving} == {"wa", "wb"}
    assert all(m.route == topic and m.deployment == f"app-{topic}" for m in msgs)
