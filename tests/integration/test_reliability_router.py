"""Router crashes: a worker SIGKILLed mid-stream, then restarted or replaced by the surviving worker of its group.

Every raw record reaches the combiner topic at least once; replays carry the same source position
``(tp, p, o)``, so deduplicating on it gives back the input exactly. With ``at_least_once`` the replay is the
batch produced after the last commit; with ``exactly_once`` on Tansu the survivor may replay partitions whose
transactional offset commit the broker dropped during the rebalance, and the killed worker's open transaction
is never aborted, so the verifier reads ``read_uncommitted`` (router/DATAPLANE.md). One
Spark run (dedupe on) over the replayed combiner topic gives the exact aggregates.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.errors import StreamingQueryException

from benchmarks.demo.processes import Child, Processes, router_command
from benchmarks.soak_parts import Verifier, kill_group, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin
from schemas.exceptions import BrokerError
from schemas.settings import KafkaSettings, SkewrouteSettings
from spark_consumers.job import start_job
from tests.integration.router_support import RAW_PARTITIONS, multiset_in, produce, wait_for, zipf_records
from tests.integration.spark_support import Rec, assert_same, read_results, reference
from tests.integration.test_router_shutdown import _routes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 12_000


def _start(procs: Processes, config: Path, port: int, log: Path) -> Child:
    return procs.start(config.stem, router_command(config, port), log)


def _consumed(port: int, route: str) -> int:
    return int(_routes(port).get("routes", {}).get(route, {}).get("consumed", -1))


def _assigned(port: int, route: str) -> list[int]:
    return list(_routes(port).get("routes", {}).get(route, {}).get("assigned", []))


def _never_routed(positions: set[tuple[str, int, int]], verifier: Verifier) -> str:
    """How many positions never reached the combiner topic, and where (per raw partition: offset ranges)."""
    missing: dict[int, list[int]] = {}
    for _, p, o in positions - set(verifier.seen):
        missing.setdefault(p, []).append(o)
    where = {p: _ranges(sorted(os)) for p, os in sorted(missing.items())}
    raw = next(iter(positions))[0]
    try:
        dead = len(read_topic(verifier.kafka, f"{raw}.dlq", idle_s=1.0, timeout_s=10))
    except BrokerError:
        dead = 0  # no dead-letter topic: nothing was dead-lettered
    return (
        f"{sum(len(os) for os in missing.values())} never routed: {where}; not in the combiner topic for a fresh "
        f"reader either; dead letters: {dead}"
    )


def _ranges(offsets: list[int]) -> str:
    out: list[str] = []
    for o in offsets:
        if out and int(out[-1].split("..")[-1]) == o - 1:
            out[-1] = f"{out[-1].split('..')[0]}..{o}"
        else:
            out.append(str(o))
    return ", ".join(out[:8]) + (" ..." if len(out) > 8 else "")


def _check_dedupe(kafka: KafkaSettings, raw: str, verifier: Verifier, records: list) -> int:
    """Every input position routed at least once; first copy per position == the input. Returns duplicates."""
    positions = {(raw, i % RAW_PARTITIONS, i // RAW_PARTITIONS) for i in range(len(records))}
    assert verifier.wait_for(positions, 60), _never_routed(positions, verifier)
    verifier.poll(1.0)  # late replays
    if verifier.stepped_past:  # Tansu: the streaming reader stepped past batches a fresh reader found
        print(f"\n{verifier.stepped_past} positions found by the fresh reader only")
    assert set(verifier.seen) == positions  # nothing that was not in the input
    deduped = Counter((d["k"], orjson.dumps(d["d"])) for d in verifier.first.values())
    assert deduped == multiset_in(records)
    return verifier.duplicates


def _kill_then_restart(
    kafka: KafkaSettings, topic: str, cfg: Path, verifier: Verifier, records: list, after: int
) -> tuple[int, int]:
    """Start worker w1, SIGKILL it once it consumed ``after`` records, restart it, check every position is routed.

    Returns (positions routed before the kill, replayed duplicates).
    """
    port = free_port()
    log = cfg.parent / "w1.log"
    with Processes() as procs:
        w = _start(procs, cfg, port, log)
        wait_for(lambda: _consumed(port, topic) >= after, 60, f"the worker to route {after} records")
        kill_group(w)
        procs.children.remove(w)
        verifier.poll(1.0)
        before = len(verifier.seen)
        assert before < len(records), "the worker finished before the kill; the test did not exercise a crash"
        w2 = _start(procs, cfg, port, log)
        dups = _check_dedupe(kafka, topic, verifier, records)  # every position routed; first copies == input
        assert w2.running
    verifier.close()
    return before, dups


def test_sigkill_mid_stream_then_restart_at_least_once(kafka: KafkaSettings, topic: str, tmp_path: Path, spark) -> None:
    records = zipf_records(N, seed=21)
    produce(kafka, topic, records)
    cfg = worker_config(
        tmp_path / "w1.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance="w1",
        state_dir=tmp_path / "state", partitioner={"name": "pkg"}, route={"value_field": "i"},
        router={"batch_max_records": 500, "delivery": "at_least_once"},
        spark={"dedupe": True, "watermark": "1 hour", "window": "10 seconds", "checkpoint_dir": str(tmp_path / "ck"),
               "progress_log": str(tmp_path / "progress.jsonl")},
    )  # fmt: skip
    t0 = time.monotonic()
    verifier = Verifier(kafka, f"{topic}.combiners", 4).keep_values()
    before, dups = _kill_then_restart(kafka, topic, cfg, verifier, records, after=3_000)
    router_s = time.monotonic() - t0

    # one Spark run, dedupe on: the replayed records count once
    settings = SkewrouteSettings.load(cfg)
    t1 = time.monotonic()
    runs = 0
    for _attempt in range(2):
        runs += 1
        handle = start_job(spark, settings, available_now=True)
        finished = False
        try:
            finished = handle.query.awaitTermination(300)
        except StreamingQueryException:
            finished = True  # judged below from handle.query.exception()
        finally:
            handle.stop()
        assert finished, "the available-now run did not end within 300 s"
        err = handle.query.exception()
        if err is None or "failed to connect back" not in str(err):
            break
        # a Python worker not connecting within Spark's fixed 10 s (an overloaded host): continue from the
        # checkpoint, the recovery the job documents (exactness below covers it)
    assert handle.query.exception() is None, handle.query.exception()
    raw = {(r.partition, r.offset): r for r in read_topic(kafka, topic, expected=N)}
    recs = [Rec(orjson.loads(r.value or b"")["key"], r.timestamp, float(orjson.loads(r.value or b"")["i"]))
            for r in raw.values()]  # fmt: skip
    progress = (tmp_path / "progress.jsonl").read_text().splitlines()
    print(f"\nSpark runs {runs}, micro-batches {[orjson.loads(p)['input_rows'] for p in progress]}")
    assert_same(read_results(kafka, f"{topic}.results"), reference(recs, 10_000, 10_000))
    print(f"routed before kill {before}/{N}, replayed duplicates {dups}; router phase {router_s:.1f} s, "
          f"spark {time.monotonic() - t1:.1f} s")  # fmt: skip


def test_sigkill_with_batches_in_flight_then_restart_loses_nothing(
    kafka: KafkaSettings, topic: str, tmp_path: Path
) -> None:
    """``max_in_flight: 4`` with a long producer linger: several batches are produced and unacknowledged when the
    worker is killed; the restart replays everything after the last commit (at-least-once, no record lost)."""
    records = zipf_records(N, seed=23)
    produce(kafka, topic, records)
    cfg = worker_config(
        tmp_path / "w1.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance="w1",
        state_dir=tmp_path / "state", partitioner={"name": "pkg"}, route={"value_field": "i"},
        router={"batch_max_records": 200, "max_in_flight": 4, "delivery": "at_least_once"},
    )  # fmt: skip
    doc = yaml.safe_load(cfg.read_text())
    doc["kafka"]["producer"] = {"linger.ms": 200}  # acks come after the next batches are produced
    cfg.write_text(yaml.safe_dump(doc))
    verifier = Verifier(kafka, f"{topic}.combiners", 4).keep_values()
    before, dups = _kill_then_restart(kafka, topic, cfg, verifier, records, after=2_000)
    print(f"\nrouted before kill {before}/{N}, replayed duplicates {dups}")


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_survivor_takes_over_a_killed_worker(kafka: KafkaSettings, topic: str, tmp_path: Path, delivery: str) -> None:
    records = zipf_records(N, seed=22)
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])
    ports = {"wa": free_port(), "wb": free_port()}
    cfgs = {
        name: worker_config(
            tmp_path / f"{name}.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance=name,
            state_dir=tmp_path / name, partitioner={"name": "cam"},
            router={"batch_max_records": 300, "delivery": delivery},
        )
        for name in ports
    }  # fmt: skip
    # the killed worker's open transaction is never aborted by Tansu: read_committed would stall at it
    verifier = Verifier(kafka, f"{topic}.combiners", 4, "read_uncommitted").keep_values()
    with Processes() as procs:
        wa = _start(procs, cfgs["wa"], ports["wa"], tmp_path / "wa.log")
        wb = _start(procs, cfgs["wb"], ports["wb"], tmp_path / "wb.log")
        wait_for(lambda: _assigned(ports["wa"], topic) and _assigned(ports["wb"], topic), 60, "both to be assigned")
        produce(kafka, topic, records)
        wait_for(lambda: min(_consumed(ports[n], topic) for n in ports) > 0, 60, "both to route")
        assert len(_assigned(ports["wa"], topic)) + len(_assigned(ports["wb"], topic)) == RAW_PARTITIONS
        kill_group(wa)
        procs.children.remove(wa)
        killed = time.monotonic()
        wait_for(lambda: len(_assigned(ports["wb"], topic)) == RAW_PARTITIONS, 30, "wb to take every partition")
        takeover = time.monotonic() - killed
        dups = _check_dedupe(kafka, topic, verifier, records)
        assert wb.running
    verifier.close()
    print(f"\ntakeover of the killed worker's partitions after {takeover:.1f} s; duplicates {dups}")
    assert takeover < 6.0 + 3.0 + 3.0  # session timeout + group join + slack
