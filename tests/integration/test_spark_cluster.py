"""The Spark job on a real standalone cluster: a master and two 1-core workers, each its own JVM.

The driver is ``skewroute spark-job`` in its own process (as an operator starts it), its executors run in the
workers' JVMs and get the project's Python from the packed environment (``spark.archives``), never from the
test's ``.venv``. Results are compared with the Python reference of the windowed aggregation: every record's
event time lies within one watermark delay of the first, so no record can be late and the reference is all of
them, however the micro-batches are cut and whatever is re-run.

- default run: one available-now run over a routed topic, exact, with executors on both workers;
- ``extended``: a streaming run during which one worker (and its executor) is SIGKILLed -- the job goes on with
  tasks re-run on the survivor -- then the driver is SIGKILLed mid-stream and restarted from the checkpoint on
  more input: exact at the end.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from benchmarks.spark.feed import produce_routed
from connectors.admin import TopicSpec, ensure_topics
from connectors.kafka import make_admin
from schemas.settings import KafkaSettings
from spark_consumers.cluster import ClusterState, StandaloneCluster
from tests.integration.spark_support import T0, Rec, assert_same, read_results, reference

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.slow]

N = 4  # combiners
SKEWROUTE = str(Path(sys.executable).parent / "skewroute")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneCluster, ClusterState]]:
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    st = c.start(workers=2, cores=1, memory="1g", timeout=300)
    try:
        yield c, st
    finally:
        c.stop()


def _records(rng: random.Random, n: int, lo: int = T0, hi: int = T0 + 15_000) -> list[Rec]:
    keys = ["hot"] * 20 + ["warm"] * 5 + [f"k{i}" for i in range(200)]
    return [Rec(rng.choice(keys), rng.randrange(lo, hi), float(rng.randrange(0, 1000))) for _ in range(n)]


def _feed(kafka: KafkaSettings, topic: str, recs: list[Rec], start: int, partitioner: str = "dalton") -> None:
    import numpy as np

    from router.partitioners import create

    comb = create(partitioner, N, window=1000, slide=100, seed=3).assign(np.array([r.key for r in recs], dtype=object))
    offsets = list(range(start, start + len(recs)))
    produce_routed(kafka, f"{topic}.combiners", [r.key for r in recs], [r.t for r in recs], [r.x for r in recs],
                   list(comb), offsets=offsets)  # fmt: skip


def _config(tmp_path: Path, kafka: KafkaSettings, topic: str, master: str, per_trigger: int) -> Path:
    doc = {
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "routes": [{"raw_topic": topic, "combiners": N}],
        "spark": {
            "master": master,
            "shuffle_partitions": 2,
            "trigger_interval": "500 milliseconds",
            "max_records_per_trigger": per_trigger,
            "watermark": "20 seconds",
            "checkpoint_dir": str(tmp_path / "ck"),
            "progress_log": str(tmp_path / "progress.jsonl"),
            "conf": {"spark.ui.enabled": "false", "spark.executor.memory": "640m", "spark.cores.max": "2"},
        },
    }
    path = tmp_path / "skewroute.yaml"
    path.write_text(yaml.safe_dump(doc))
    ensure_topics(make_admin(kafka), [TopicSpec(f"{topic}.combiners", N, exact=True)])
    return path


def _driver(config: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKEWROUTE_") or k == "SKEWROUTE_PACK_CACHE"}
    with log.open("ab") as out:
        return subprocess.Popen([SKEWROUTE, "spark-job", "--config", str(config), *extra], stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip


def _read_rows(progress: Path) -> int:
    if not progress.is_file():
        return 0
    return sum(json.loads(line)["input_rows"] for line in progress.read_text().splitlines() if line.strip())


def _executor_dirs(state_dir: Path, worker: int) -> list[Path]:
    """Executor folders a worker created (``work/worker-i/app-*/<exec id>``) that hold the unpacked env."""
    return [p for p in (state_dir / "work" / f"worker-{worker}").glob("app-*/*") if (p / "environment").is_dir()]


def _wait(cond, timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text()[-3000:] if log else ""
            raise AssertionError(f"driver exited ({proc.returncode}) before {what}:\n{tail}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_available_now_on_two_workers_is_exact(cluster, kafka, topic, tmp_path) -> None:
    c, st = cluster
    recs = _records(random.Random(1), 20_000)
    config = _config(tmp_path, kafka, topic, st.master_url, per_trigger=5_000)
    _feed(kafka, topic, recs, 0)
    log = tmp_path / "driver.log"
    driver = _driver(config, log, "--once")
    assert driver.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert_same(read_results(kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
    assert _read_rows(tmp_path / "progress.jsonl") == len(recs)
    for w in (0, 1):  # tasks ran in both workers' executors, each with the shipped environment unpacked
        assert _executor_dirs(c.state_dir, w), f"worker {w} ran no executor with ./environment"
    env = _executor_dirs(c.state_dir, 0)[0] / "environment"
    site = next(env.glob("lib/python3.*/site-packages"))
    assert (site / "spark_consumers" / "job.py").is_file()  # skewroute installed in the archive, not editable
    assert not list(site.glob("__editable__*")) and not (site / "pyspark" / "jars").exists()
    stderr = "".join(p.read_text(errors="replace") for p in c.state_dir.glob("work/*/app-*/*/stderr"))
    assert ".venv/bin/python" not in stderr  # (the classpath names the workers' own Spark, the pyspark package)


@pytest.mark.extended
def test_worker_killed_then_driver_restarted_stays_exact(kafka, topic, tmp_path) -> None:
    c = StandaloneCluster(tmp_path / "cluster")
    st = c.start(workers=2, cores=1, memory="1g", timeout=300)
    rng = random.Random(2)
    first, second = _records(rng, 30_000), _records(rng, 10_000, T0 + 5_000, T0 + 18_000)
    progress = tmp_path / "progress.jsonl"
    try:
        config = _config(tmp_path, kafka, topic, st.master_url, per_trigger=1_500)
        _feed(kafka, topic, first, 0)
        log = tmp_path / "driver.log"
        driver = _driver(config, log)
        try:
            _wait(lambda: _read_rows(progress) >= 3_000, 600, "two micro-batches", driver, log)
            _wait(lambda: _executor_dirs(c.state_dir, 1) != [], 60, "an executor on worker 1", driver, log)
            c.kill_worker(1)  # the worker JVM and its executor: a lost machine
            done_at_kill = _read_rows(progress)
            assert done_at_kill < len(first)
            _wait(lambda: _read_rows(progress) >= done_at_kill + 6_000, 600, "batches after the kill", driver, log)
            assert driver.poll() is None
            os.killpg(driver.pid, signal.SIGKILL)  # the driver dies mid-stream
            driver.wait(timeout=30)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(timeout=30)
        assert _read_rows(progress) < len(first)
        _feed(kafka, topic, second, len(first))
        again = _driver(config, log, "--once")  # same checkpoint
        assert again.wait(timeout=900) == 0, log.read_text()[-3000:]
        assert_same(read_results(kafka, f"{topic}.results"), reference(first + second, 10_000, 10_000))
        workers = {w["state"] for w in c.master_json(st).get("workers", [])}
        assert "ALIVE" in workers
    finally:
        c.stop()
