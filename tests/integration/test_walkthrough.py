"""A new user's first hour on Apache Kafka, as the README tells it, checked end to end (issue 29).

``skewroute init`` writes the starter from a sample of the user's topic; two routers start on this host from
that one file (no edit: each derives its own port and instance id); one is SIGKILLed mid-backlog and
restarted; ``skewroute spark-job --once`` with the starter's sink writes the results, which must equal a plain
computation over the raw records: nothing lost, nothing counted twice. Only environment variables differ from
a user's run: smaller router batches, so that the kill lands mid-backlog, and a slot folder of the test's own.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from connectors.apache_kafka import ApacheKafkaCluster
from schemas.settings import KafkaSettings, SkewrouteSettings
from tests.integration.router_support import committed, end_offsets, produce, wait_for
from tests.integration.spark_support import Rec, assert_same, read_results, reference
from tests.integration.test_router_cli import _get

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.spark, pytest.mark.slow]

N = 40_000
SAMPLE = 4_000  # produced before `init` (it samples the topic); the rest is the backlog the routers meet
SKEWROUTE = str(Path(sys.executable).with_name("skewroute"))


def _records(t0_ms: int) -> tuple[list[tuple[bytes, bytes]], list[Rec]]:
    """A keyed JSON stream with ISO times and amounts (exact in binary: sums do not depend on order)."""
    pairs, recs = [], []
    for i in range(N):
        user, t, amount = f"u{(i * i) % 97 if i % 3 else i % 5}", t0_ms + 10 * i, (i % 40) * 0.25
        iso = datetime.fromtimestamp(t / 1000, UTC).isoformat(timespec="milliseconds")
        pairs.append((user.encode(), orjson.dumps({"user": user, "ts": iso, "amount": amount})))
        recs.append(Rec(user, t, amount))
    return pairs, recs


def _env(cwd: Path) -> dict[str, str]:
    # Small batches: the kill lands mid-backlog. A slot folder of this test's own: routers of other sessions on a
    # shared machine cannot take the killed worker's slot before it is restarted.
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SKEWROUTE_ROUTER__BATCH_MAX_RECORDS": "200",
            "SKEWROUTE_ROUTER__SLOT_DIR": str(cwd / "slots")}  # fmt: skip


class _Router:
    """One ``skewroute router --config starter.yaml`` in ``cwd``, its web port read from its log."""

    def __init__(self, cwd: Path, log: Path) -> None:
        self.log = log
        with log.open("ab") as f:
            self.proc = subprocess.Popen([SKEWROUTE, "router", "--config", "starter.yaml"], cwd=cwd, env=_env(cwd),
                                         stdout=f, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.offset = log.stat().st_size if log.exists() else 0

    def port(self) -> int | None:
        m = re.findall(r"web server on http://127\.0\.0\.1:(\d+)", self.log.read_text())
        return int(m[-1]) if m else None

    def routes(self) -> dict[str, Any]:
        port = self.port()
        return _get(f"http://127.0.0.1:{port}/routes") if port else {}

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def test_init_two_routers_kill_one_spark_once_exact(apache_kafka: ApacheKafkaCluster, tmp_path: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers=apache_kafka.bootstrap)
    topic = f"payments-{os.getpid()}"
    now = int(datetime.now(UTC).timestamp() * 1000)
    pairs, recs = _records(now - now % 10_000 - 300_000)  # the last five minutes
    produce(kafka, topic, pairs[:SAMPLE])
    t0 = time.monotonic()
    init = subprocess.run(
        [SKEWROUTE, "init", "--bootstrap", kafka.bootstrap_servers, "--topic", topic, "--out", "starter.yaml",
         "--records", str(SAMPLE), "--seconds", "5", "-p", "hash,pkg"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    settings = SkewrouteSettings.load(tmp_path / "starter.yaml")
    route = settings.routes[0]
    assert (route.key.field, route.time.field, route.time.unit, route.value_field) == ("user", "ts", "iso", "amount")
    group = f"{settings.router.app_id}.{route.route_name}"
    t_init = time.monotonic()

    routers = [_Router(tmp_path, tmp_path / f"router-{i}.log") for i in range(2)]
    try:

        def view(r: _Router) -> dict[str, Any]:
            return dict(r.routes().get("routes", {}).get(topic, {}))

        wait_for(lambda: all(view(r).get("assigned") for r in routers), 90, "both routers assigned")
        produce(kafka, topic, pairs[SAMPLE:])  # the backlog (round-robin continues: SAMPLE % 4 == 0)
        victim = routers[0]
        wait_for(lambda: view(victim).get("consumed", 0) >= SAMPLE // 2 + 2_000, 60, "the victim into the backlog")
        identity = victim.routes()["instance"]
        victim.stop(signal.SIGKILL)  # mid-backlog: its last batches were produced but not all committed
        done_at_kill = sum(max(0, o) for o in committed(kafka, group, topic).values())
        assert done_at_kill < N, "the backlog was routed before the kill; the test did not exercise a crash"
        routers[0] = _Router(tmp_path, victim.log)
        wait_for(lambda: routers[0].routes().get("instance") == identity, 60, "the restarted worker, same id")
        wait_for(lambda: committed(kafka, group, topic) == end_offsets(N), 90, "every record routed and committed")
    finally:
        for r in routers:
            r.stop()
    assert not any("Traceback" in r.log.read_text() for r in routers)
    t_routers = time.monotonic()

    job = subprocess.run([SKEWROUTE, "spark-job", "--config", "starter.yaml", "--once"], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=400)  # fmt: skip
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    t_spark = time.monotonic()
    assert_same(read_results(kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
    print(
        f"\ninit {t_init - t0:.0f} s, routers (kill at {done_at_kill} committed) {t_routers - t_init:.0f} s, "
        f"spark-job --once {t_spark - t_routers:.0f} s"
    )
