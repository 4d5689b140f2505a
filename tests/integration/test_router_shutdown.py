"""Worker processes: SIGTERM stops one cleanly with its offsets committed; a restart continues without re-sending.

The first worker runs as ``skewroute router``, the restarted one as ``faust -A router.app worker`` (settings
from ``$SKEWROUTE_CONFIG``), so both entry points are exercised.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.broker import free_port
from schemas.settings import KafkaSettings
from tests.integration.router_support import (
    committed,
    multiset_in,
    multiset_out,
    produce,
    routed,
    wait_for,
    zipf_records,
)

pytestmark = pytest.mark.kafka

BIN = Path(sys.executable).parent


def _routes(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/routes", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return {}


def _consumed(port: int, route: str) -> int:
    return int(_routes(port).get("routes", {}).get(route, {}).get("consumed", -1))


def _start(cmd: list[str], config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SKEWROUTE_CONFIG": str(config)}
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=config.parent)


def _terminate(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("worker did not stop within 60 s of SIGTERM:\n" + log.read_text()[-3000:]) from None
    assert rc == 0, f"worker exited with {rc}:\n" + log.read_text()[-3000:]


def test_sigterm_commits_and_restart_continues_without_resending(
    kafka: KafkaSettings, topic: str, tmp_path: Path
) -> None:
    n = 60_000
    records = zipf_records(n, seed=5)
    produce(kafka, topic, records)
    port = free_port()
    cfg = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "router": {
            "app_id": f"app-{topic}",
            "state_dir": str(tmp_path / "state"),
            "batch_max_records": 500,  # small batches: SIGTERM lands mid-stream
            "log_format": "json",
        },
        "routes": [{"raw_topic": topic, "combiners": 4, "partitioner": {"name": "dalton"}}],
    }
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "worker.log"
    group = f"app-{topic}.{topic}"

    w1 = _start([str(BIN / "skewroute"), "router", "--web-port", str(port)], config, log)
    try:
        wait_for(lambda: _consumed(port, topic) >= 5_000, 60, "the first worker to route 5000 records")
    finally:
        _terminate(w1, log)
    first = routed(kafka, f"{topic}.combiners")
    done = sum(max(o, 0) for o in committed(kafka, group, topic).values())  # -1001: nothing committed yet
    assert 0 < len(first) == done  # everything delivered is committed, and nothing more
    stopped_mid_stream = done < n

    w2 = _start([str(BIN / "faust"), "-A", "router.app", "worker", "--web-port", str(port)], config, log)
    try:
        wait_for(lambda: _consumed(port, topic) == n - done, 60, "the restarted worker to route the rest")
    finally:
        _terminate(w2, log)
    out = routed(kafka, f"{topic}.combiners", expected=n)
    assert len(out) == n
    assert multiset_out(out) == multiset_in(records)  # no record lost or sent twice across the restart
    assert sum(committed(kafka, group, topic).values()) == n
    assert stopped_mid_stream, "the first worker finished before SIGTERM; the test did not exercise a stop"
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"ts"')]
    assert any("stopped after" in d["msg"] for d in lines)  # structured logs of the data plane
