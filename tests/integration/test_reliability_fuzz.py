"""Bad input through a running ``skewroute router`` process: hypothesis-generated malformed raw records and
malformed or foreign control-topic messages.

Over 10,000 malformed raw records (invalid JSON, wrong types, missing key or time, times far ahead, huge
records, keys and numbers, non-UTF-8, empty and null values, JSON that is not an object) mixed with good
ones: every bad one is in the DLQ with the field at fault and a reason, every good one is routed, and the
worker process is the same one throughout (same pid, alive, no data-plane failure). Garbage on the control
topic is logged once as a warning and ignored, and the Dalton rounds go on.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.demo.processes import Processes, router_command
from benchmarks.soak_parts import ControlWatcher, Verifier, worker_config
from benchmarks.topic_reader import read_topic
from connectors.admin import TopicSpec, ensure_topics
from connectors.broker import free_port
from connectors.kafka import make_admin, make_producer
from schemas.control import SyncMessage, encode_control
from schemas.records import DeadLetter
from schemas.settings import KafkaSettings
from tests.integration.router_support import RAW_PARTITIONS, wait_for
from tests.integration.test_router_shutdown import _routes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MAX_RECORD, MAX_KEY = 2048, 64
MIN_BAD = 10_000


def _doc(**fields: Any) -> bytes:
    return orjson.dumps(fields)


_i64 = st.integers(-(2**63), 2**63 - 1)
_key = st.one_of(st.text(min_size=1, max_size=10), _i64)
_NOW_MS = int(time.time() * 1000)
_ts = st.integers(0, _NOW_MS)  # good times: not ahead of the wall clock (routes dead-letter > 1 h ahead)
_x = st.one_of(st.none(), st.integers(-(2**53), 2**53), st.floats(allow_nan=False, allow_infinity=False))
_long_key = st.text(min_size=MAX_KEY + 1, max_size=MAX_KEY + 40)
_containers = st.one_of(st.lists(_i64, max_size=3), st.dictionaries(st.text(max_size=3), _i64, max_size=2))
_not_key = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(), st.just(""),
                     _containers, _long_key)  # fmt: skip
_not_ts = st.one_of(st.text(max_size=8), st.booleans(), st.none(), st.lists(_i64, max_size=2),
                    st.integers(-(2**63), -1), st.integers(2**53, 2**63 - 1), st.floats(max_value=-1.0))  # fmt: skip
_not_x = st.one_of(st.text(max_size=8), st.booleans(), st.lists(_i64, max_size=2),
                   st.dictionaries(st.text(max_size=2), _i64, max_size=1))  # fmt: skip

#: (category, expected DLQ field, raw value or None)
GOOD = st.builds(lambda k, t, x: ("good", "", _doc(key=k, ts=t, x=x)), _key, _ts, _x)
BAD = st.one_of(
    st.builds(lambda s: ("invalid json", "value", ("~" + s).encode()), st.text(max_size=30)),
    st.builds(
        lambda s: ("truncated json", "value", _doc(key="k", ts=1)[:-1] + s.encode()),
        st.text(max_size=5).filter(lambda s: "}" not in s),
    ),  # fmt: skip
    st.builds(lambda b: ("non-utf8", "value", b'{"key":"\xff' + b + b'","ts":1}'), st.binary(max_size=10)),
    st.just(("empty", "value", b"")),
    st.just(("null", "value", None)),
    st.builds(
        lambda v: ("not an object", "value", orjson.dumps(v)),
        st.one_of(_i64, st.lists(_i64, max_size=3), st.text(max_size=5)),
    ),  # fmt: skip
    st.builds(lambda n: ("huge record", "value", _doc(key="k", ts=1, pad="a" * n)), st.integers(MAX_RECORD, 60_000)),
    st.builds(
        lambda e: ("huge number", "value", b'{"key":"k","ts":1,"x":1e' + str(e).encode() + b"}"),
        st.integers(309, 99_999),
    ),  # fmt: skip
    st.builds(lambda k, t: ("key: wrong type/empty/too long", "key", _doc(key=k, ts=t)), _not_key, _ts),
    st.builds(lambda t: ("key missing", "key", _doc(kee="k", ts=t)), _ts),
    st.builds(lambda k, t: ("time: wrong type/out of range", "ts", _doc(key=k, ts=t)), _key, _not_ts),
    st.builds(lambda k: ("time missing", "ts", _doc(key=k)), _key),
    st.builds(
        lambda k, t: ("time: too far ahead", "ts", _doc(key=k, ts=t)), _key, st.integers(_NOW_MS + 7_200_000, 2**53 - 1)
    ),  # fmt: skip
    st.builds(lambda k, t, x: ("measure: wrong type", "x", _doc(key=k, ts=t, x=x)), _key, _ts, _not_x),
)


def _rounds(watcher: ControlWatcher, since: float) -> int:
    watcher.poll(0.2)
    return sum(1 for at, _, _ in watcher.globals if at > since)


def test_fuzzed_bad_records_are_dead_lettered_and_the_worker_survives(
    kafka: KafkaSettings, topic: str, tmp_path: Path
) -> None:
    control = f"{topic}.control"
    ensure_topics(make_admin(kafka), [TopicSpec(topic, RAW_PARTITIONS)])
    cfg = worker_config(
        tmp_path / "w.yaml", kafka.bootstrap_servers, topic, app_id=f"app-{topic}", instance="w1",
        state_dir=tmp_path / "state", partitioner={"name": "dalton"},
        route={"key": {"source": "field", "field": "key"}, "time": {"source": "field", "field": "ts"},
               "value_field": "x", "max_record_bytes": MAX_RECORD},
        router={"max_key_bytes": MAX_KEY, "control_topic": control, "dsync_ms": 200},
    )  # fmt: skip
    port = free_port()
    producer = make_producer(kafka)
    sent: dict[tuple[int, int], tuple[str, str, bytes | None]] = {}
    errors: list[str] = []
    count = [0]

    def deliver(err: Any, msg: Any, rec: tuple[str, str, bytes | None]) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            sent[(msg.partition(), msg.offset())] = rec

    def _cb(rec: tuple[str, str, bytes | None]) -> Any:
        return lambda err, msg: deliver(err, msg, rec)

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(BAD, min_size=150, max_size=250), st.lists(GOOD, min_size=20, max_size=40), st.randoms())
    def feed(bad: list, good: list, rnd: Any) -> None:
        recs = bad + good
        rnd.shuffle(recs)
        for rec in recs:
            producer.produce(topic, rec[2], b"kk", partition=count[0] % RAW_PARTITIONS, on_delivery=_cb(rec))
            count[0] += 1
        producer.poll(0)

    log = tmp_path / "w.log"
    t0 = time.monotonic()
    with Processes() as procs:
        w = procs.start("w1", router_command(cfg, port), log)
        pid = w.proc.pid
        while sum(1 for r in sent.values() if r[0] != "good") < MIN_BAD:
            feed()
            assert producer.flush(30) == 0 and not errors, errors
        gen_s = time.monotonic() - t0
        total = len(sent)
        wait_for(lambda: _routes(port).get("routes", {}).get(topic, {}).get("consumed", -1) >= total, 120,
                 f"the worker to handle {total} records")  # fmt: skip

        # malformed and foreign control messages while the route syncs
        watcher = ControlWatcher(kafka, control)
        wait_for(lambda: _rounds(watcher, 0.0) >= 3, 30, "Dalton rounds")
        foreign = SyncMessage(deployment="someone-else", route=topic, instance="x", seq=0, records=1)
        incomplete = orjson.dumps({"v": 1, "type": "global", "deployment": f"app-{topic}"})
        junk = [b"{not json", b"", b'{"v": 2, "type": "sync"}', incomplete, encode_control(foreign)]
        cp = make_producer(kafka)
        for raw in junk:
            cp.produce(control, raw, topic.encode(), partition=0)
        cp.produce(control, b"\xff\xfe garbage", b"\xff", partition=0)  # no route of ours: foreign, ignored
        assert cp.flush(10) == 0
        injected = time.monotonic()
        wait_for(lambda: _rounds(watcher, injected + 0.5) >= 3, 30, "rounds after the garbage")
        watcher.close()
        status = _routes(port)["routes"][topic]
        assert w.running and w.proc.pid == pid and status["alive"], w.log_tail()
    routed_s = time.monotonic() - t0

    bad = {pos: r for pos, r in sent.items() if r[0] != "good"}
    good = {pos: r for pos, r in sent.items() if r[0] == "good"}
    assert len(bad) >= MIN_BAD
    dlq = read_topic(kafka, f"{topic}.dlq", expected=len(bad))
    seen: Counter[tuple[int, int]] = Counter()
    for r in dlq:
        dl = DeadLetter.model_validate_json(r.value or b"")
        pos = (dl.partition, dl.offset)
        seen[pos] += 1
        cat, fld, original = bad[pos]  # a KeyError would mean a good record was dead-lettered
        assert dl.field == fld and dl.error.startswith(f"{fld}: ") and len(dl.error) > len(fld) + 3, (cat, dl.error)
        assert (base64.b64decode(dl.value_b64) if dl.value_b64 is not None else None) == original, cat
    assert set(seen) == set(bad) and max(seen.values()) == 1  # every bad record once (no crash, no replay)
    verifier = Verifier(kafka, f"{topic}.combiners", 4)
    assert verifier.wait_for({(topic, p, o) for p, o in good}, 30)
    assert verifier.duplicates == 0 and len(verifier.seen) == len(good)
    verifier.close()

    lines = [json.loads(x) for x in log.read_text(errors="replace").splitlines() if x.startswith('{"ts"')]
    msgs = [d["msg"] for d in lines]
    assert any("ignoring control message (malformed)" in m for m in msgs), msgs[-20:]
    assert any("ignoring control message (foreign deployment)" in m for m in msgs), msgs[-20:]
    assert not any("failed" in m for m in msgs), [m for m in msgs if "failed" in m]
    cats = Counter(r[0] for r in bad.values())
    print(f"\n{len(bad)} bad + {len(good)} good records ({gen_s:.1f} s to generate and send), all handled by pid "
          f"{pid} in {routed_s:.1f} s; DLQ {len(dlq)}; categories {dict(cats)}")  # fmt: skip
