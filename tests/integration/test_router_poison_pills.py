"""Poison pills through a real ``skewroute router`` process: every bad record in the DLQ once, the route goes on.

Each hostile record sits next to good ones: a raw record just under ``max_record_bytes`` (routed), records above
it and above the producer's message limit (dead letters as envelopes), an event time that overflows a double
(``1e306`` s), milliseconds and microseconds written where seconds are expected, a record two days ahead,
NaN/inf measures and a negative time. The test sends the mix twice and checks: every
bad record dead-lettered exactly once with its reason, every good one routed, the worker's pid unchanged (no
crash, no restart), its RSS flat between the two rounds, the window clock never ahead of the tolerance, and
``/ready`` answering 200.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from benchmarks.demo.processes import Processes, router_command
from benchmarks.soak_parts import Verifier, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin, make_producer
from schemas.records import DeadLetter
from schemas.settings import KafkaSettings
from tests.integration.router_support import RAW_PARTITIONS, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

GOOD_PER_BAD = 40


def _bad(now_s: int) -> list[tuple[bytes, str, str]]:
    """(raw value, field the dead letter names, words of its reason)."""
    pad = b"x" * 950_000
    big = b"y" * 1_000_100
    return [
        (b'{"key":"b1","t":1e306,"x":1}', "t", "out of range"),
        (b'{"key":"b2","t":%d,"x":1}' % (now_s * 1000), "t", "ahead of the wall clock"),  # ms written as s
        (b'{"key":"b3","t":%d,"x":1}' % (now_s * 1_000_000), "t", "out of range"),  # us written as s
        (b'{"key":"b4","t":%d,"x":1}' % (now_s + 2 * 86_400), "t", "ahead of the wall clock"),
        (b'{"key":"b5","t":%d,"x":NaN}' % now_s, "value", "not valid JSON"),
        (b'{"key":"b6","t":%d,"x":1e400}' % now_s, "value", "not valid JSON"),
        (b'{"key":"b7","t":-1,"x":1}', "t", "out of range"),
        (b'{"key":"b8","t":%d,"pad":"%s"}' % (now_s, pad), "value", "limit 900000"),  # envelope
        (b'{"key":"b9","t":%d,"pad":"%s"}' % (now_s, big), "value", "limit 900000"),  # above the producer limit
    ]


def _rss(pid: int) -> int:
    """Resident set size of a process in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _round(kafka: KafkaSettings, raw: str, offsets: list[int], now_s: int) -> tuple[dict[tuple[int, int], str], set]:
    """Produce one mix; returns the bad records' positions -> expected reason, and the good positions.

    ``offsets`` holds the next offset of every raw partition (updated)."""
    p = make_producer(kafka, **{"message.max.bytes": 2_000_000})
    bad, good = {}, set()
    near = b'{"key":"near","t":%d,"x":2,"pad":"' % now_s
    near += b"z" * (899_000 - len(near)) + b'"}'
    rows: list[tuple[bytes, str | None]] = []
    for value, field, words in _bad(now_s):
        rows += [(b'{"key":"g%d","t":%d,"x":1.5}' % (i % 97, now_s), None) for i in range(GOOD_PER_BAD)]
        rows.append((value, f"{field}|{words}"))
    rows.append((near, None))
    for seq, (value, why) in enumerate(rows):
        part = seq % RAW_PARTITIONS
        p.produce(raw, value, b"k", partition=part)
        if why is None:
            good.add((part, offsets[part]))
        else:
            bad[(part, offsets[part])] = why
        offsets[part] += 1
    assert p.flush(60) == 0
    return bad, good


def test_poison_pills_dead_lettered_once_worker_survives(kafka: KafkaSettings, topic: str, tmp_path: Path) -> None:
    raw = topic
    ensure_topics(make_admin(kafka), [TopicSpec(raw, RAW_PARTITIONS)])
    cfg = worker_config(
        tmp_path / "w1.yaml", kafka.bootstrap_servers, raw, app_id=f"app-{raw}", instance="w1",
        state_dir=tmp_path / "w1", partitioner={"name": "dalton"},
        route={"time": {"source": "field", "field": "t", "unit": "s"}, "value_field": "x",
               "window": {"size": 10_000, "slide": 1_000}},
        router={"batch_max_records": 200},
    )  # fmt: skip
    port = free_port()
    now_s = int(time.time())
    offsets = [0] * RAW_PARTITIONS
    with Processes() as procs:
        child = procs.start("w1", router_command(cfg, port), tmp_path / "w1.log")
        pid = child.proc.pid
        verifier = Verifier(kafka, f"{raw}.combiners", 4)
        bad, good = _round(kafka, raw, offsets, now_s)
        wait_for(lambda: verifier.poll(0.2) >= 0 and len(verifier.seen) >= len(good), 120, "the good records")
        rss1 = _rss(pid)
        bad2, good2 = _round(kafka, raw, offsets, now_s)
        bad |= bad2
        good |= good2
        wait_for(lambda: verifier.poll(0.2) >= 0 and len(verifier.seen) >= len(good), 120, "the good records")
        rss2 = _rss(pid)
        status, body = _get(port, "/ready")
        metrics = _get(port, "/metrics")[1].decode()
        routes = json.loads(_get(port, "/routes")[1] or b"{}")
        assert child.running and child.proc.pid == pid, child.log_tail()  # never crashed nor restarted
        verifier.close()
    assert {(p, o) for (_, p, o) in verifier.seen} == good  # every good record routed, nothing else
    assert max(verifier.seen.values()) == 1
    dlq = read_topic(kafka, f"{raw}.dlq", expected=len(bad), idle_s=3.0)
    letters = [DeadLetter.model_validate_json(r.value or b"") for r in dlq]
    got = {(d.partition, d.offset): d for d in letters}
    assert len(letters) == len(got) == len(bad)  # each bad record once
    for pos, why in bad.items():
        field, words = why.split("|")
        d = got[pos]
        assert d.field == field and words in d.error, (pos, d.error)
        assert len(d.model_dump_json()) < 1_000_000
        if d.size is not None and d.size > 700_000:
            assert d.truncated and d.value_b64 is not None and len(d.value_b64) <= 4 * 1024 // 3 + 4
    assert all(len(r.value or b"") < 10_000 for r in dlq)  # the large ones went as envelopes
    assert status == 200 and orjson.loads(body)["ready"] is True
    clock = next(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("skewroute_event_time_clock_ms{")
    )
    assert now_s * 1000 <= clock <= time.time() * 1000 + 3_600_000
    assert routes["routes"][raw]["dead_lettered"] == len(bad)
    assert rss2 - rss1 < 64 * 2**20, (rss1, rss2)  # flat: the second round adds no lasting state
