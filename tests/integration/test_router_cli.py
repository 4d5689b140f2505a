"""``skewroute router`` as a user starts it: refuses a raw topic that does not exist (one line, exit 4, nothing
created), and runs several workers on one host from one config (each its own loopback port and instance id)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.admin import partition_count
from connectors.kafka import make_admin
from router.preflight import faust_leader_topic
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, wait_for, zipf_records

pytestmark = pytest.mark.kafka

SKEWROUTE = str(Path(sys.executable).with_name("skewroute"))


def _config(tmp_path: Path, kafka: KafkaSettings, topic: str) -> Path:
    cfg = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "routes": [{"raw_topic": topic, "combiners": 2, "partitioner": {"name": "hash"}}],
        "router": {"app_id": f"app-{topic}", "state_dir": str(tmp_path / "state"), "log_format": "text"},
    }
    path = tmp_path / "skewroute.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_missing_raw_topic_is_refused_in_one_line(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    res = subprocess.run(
        [SKEWROUTE, "router", "--config", str(_config(tmp_path, kafka, topic)), "--broker-wait", "5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    errors = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert res.returncode == 4, res.stdout + res.stderr
    assert len(errors) == 1 and repr(topic) in errors[0] and "create it" in errors[0], res.stderr
    admin = make_admin(kafka)
    assert partition_count(admin, f"{topic}.combiners") is None and partition_count(admin, f"{topic}.dlq") is None


def _get(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return dict(json.loads(r.read()))
    except OSError:
        return {}


def test_two_workers_on_one_host_from_one_config(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    produce(kafka, topic, zipf_records(2_000, seed=3))
    config = _config(tmp_path, kafka, topic)
    logs = [tmp_path / f"w{i}.log" for i in range(2)]
    procs = []
    for log in logs:
        with log.open("wb") as f:
            procs.append(subprocess.Popen([SKEWROUTE, "router", "--config", str(config)], stdout=f,
                                          stderr=subprocess.STDOUT, cwd=tmp_path))  # fmt: skip
        time.sleep(0.5)
    try:

        def ports() -> list[int]:
            found = [re.search(r"web server on http://127\.0\.0\.1:(\d+)", log.read_text()) for log in logs]
            return [int(m[1]) for m in found if m]

        wait_for(lambda: len(ports()) == 2, 60, "both workers' web servers")
        a, b = ports()
        assert a != b
        wait_for(lambda: all(_get(f"http://127.0.0.1:{p}/routes").get("routes") for p in (a, b)), 90, "routes")
        ids = {_get(f"http://127.0.0.1:{p}/routes")["instance"] for p in (a, b)}
        assert len(ids) == 2 and all(re.fullmatch(r".+-\d+", i) for i in ids), ids
        assert all(p.poll() is None for p in procs), [log.read_text()[-2000:] for log in logs]
        assert not any("Traceback" in log.read_text() for log in logs)
        # Item 9: the route's topics and Faust's leader topic, which skewroute created itself (before Faust would)
        created = {t for t in make_admin(kafka).list_topics(timeout=10).topics if topic in t}
        leader = faust_leader_topic(f"app-{topic}")
        assert created == {topic, f"{topic}.combiners", f"{topic}.dlq", leader}, created
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
