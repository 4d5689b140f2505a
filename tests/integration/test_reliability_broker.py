"""Broker trouble: down at start, and an in-memory broker restarted under a running worker.

* Down at start: ``skewroute router`` retries with backoff for ``--broker-wait`` seconds, then exits 3 with one
  line naming the bootstrap servers (bounded time).
* Restart mid-run: Tansu loses every topic, record and committed offset. Before the fix the worker rejoined
  the group and then waited silently past the end of the new, empty raw partitions (records acknowledged
  after the restart were never routed, the worker looked healthy). Now the data plane sees on re-assignment
  that the group's committed offsets went below its own, fails with an error saying the broker lost its
  state, and the worker exits non-zero: either every acknowledged record is readable, or the worker reports
  the failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.demo.processes import Processes, router_command
from benchmarks.soak_parts import RawProducer, Verifier, worker_config
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import EmbeddedBroker, free_port
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings
from tests.integration.router_support import RAW_PARTITIONS, wait_for
from tests.integration.test_router_shutdown import _routes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BIN = Path(sys.executable).parent


def test_broker_down_at_start_fails_clearly_in_bounded_time(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    cfg = worker_config(tmp_path / "w.yaml", bootstrap, "raw", app_id="down", instance="w", state_dir=tmp_path / "s")
    t0 = time.monotonic()
    out = subprocess.run(
        [str(BIN / "skewroute"), "router", "--config", str(cfg), "--web-port", str(free_port()), "--broker-wait", "4"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    took = time.monotonic() - t0
    lines = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    print(f"\nexit {out.returncode} after {took:.1f} s: {lines}")
    assert out.returncode == 3, out.stderr[-2000:]
    assert len(lines) == 1 and bootstrap in lines[0] and "4 s" in lines[0] and "attempts" in lines[0]
    assert "Traceback" not in out.stderr
    assert took < 4 + 2 + 10  # the wait, one last attempt, interpreter start-up


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_broker_restart_mid_run_is_reported_not_silent(tmp_path: Path, delivery: str) -> None:
    port = free_port()
    broker = EmbeddedBroker(port, state_dir=tmp_path / "broker").start()
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap)
    raw = "raw-restart"
    try:
        ensure_topics(make_admin(kafka), [TopicSpec(raw, RAW_PARTITIONS)])
        cfg = worker_config(tmp_path / "w.yaml", broker.bootstrap, raw, app_id="restart", instance="w1",
                            state_dir=tmp_path / "state", partitioner={"name": "pkg"},
                            router={"delivery": delivery})  # fmt: skip
        web = free_port()
        log = tmp_path / "w.log"
        with Processes() as procs:
            w = procs.start("w1", router_command(cfg, web), log)
            first = RawProducer(kafka, raw, 0)
            first.send(3000)
            first.stop()
            wait_for(lambda: _routes(web).get("routes", {}).get(raw, {}).get("consumed", 0) >= 3000, 60, "routing")
            broker.stop()
            time.sleep(2)
            broker = EmbeddedBroker(port, state_dir=tmp_path / "broker").start()  # same address, empty
            restarted = time.monotonic()
            ensure_topics(make_admin(kafka), [TopicSpec(raw, RAW_PARTITIONS)])
            second = RawProducer(kafka, raw, 0)
            second.send(2000)
            second.stop()
            acked = second.positions()
            assert len(acked) == 2000
            try:
                code: int | None = w.proc.wait(45)  # one outcome: the worker reports the failure and exits
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - restarted
            verifier = Verifier(kafka, f"{raw}.combiners", 4)
            delivered = verifier.wait_for(acked, 5 if code else 40)  # the other: everything acknowledged is routed
            verifier.close()
    finally:
        broker.stop()
    lines = [json.loads(x) for x in log.read_text(errors="replace").splitlines() if x.startswith('{"ts"')]
    errors = [d for d in lines if d["level"] == "ERROR" and "lost the committed offsets" in json.dumps(d)]
    print(f"\nafter the broker restart: routed everything acknowledged: {delivered}; worker exit code {code} "
          f"{took:.1f} s after the restart; error: {errors[0]['msg'] if errors else None}")  # fmt: skip
    assert delivered or code not in (None, 0), "silent: records acknowledged but never routed, worker still up"
    assert not delivered  # this broker loses the state; the worker must say so
    assert code not in (None, 0) and errors, log.read_text()[-3000:]
