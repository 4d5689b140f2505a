"""Issue 18 (data plane): bad records never raise, envelopes stay small, settings that cannot work are refused,
windowed metric state and the key cache stay bounded."""

from __future__ import annotations

import base64
import time

import numpy as np
import pytest

from router.extract import Extractor, SourceRecord
from router.observability import RouterMetrics, WindowTracker
from router.partitioners import keys as keys_mod
from router.partitioners.keys import KeyCodec
from router.plane_parts import check_sizes, dead_letter, dead_letter_bytes, refused_source
from schemas.exceptions import ConfigError, RecordError
from schemas.records import encode_routed_v2
from schemas.settings import KafkaSettings, RouterSettings, RouteSettings


def Msg(v: bytes | None, k: bytes | None = b"k", ts: int = 1_700_000_000_000, p: int = 0, o: int = 0) -> SourceRecord:  # noqa: N802
    """A raw record from topic ``raw`` (keyword names as the tests use them)."""
    return SourceRecord("raw", p, o, k, v, ts)


def _route(**kw: object) -> RouteSettings:
    return RouteSettings.model_validate(
        {"raw_topic": "raw", "time": {"source": "field", "field": "t", "unit": "s"}, "value_field": "x", **kw}
    )


def test_overflowing_and_far_ahead_times_are_bad_records_not_exceptions() -> None:
    now_s = int(time.time())
    ex = Extractor(_route())
    values = [
        b'{"key":"a","t":1e306}',  # * 1000 overflows to inf: OverflowError before the fix
        b'{"key":"a","t":%d}' % (now_s * 1000),  # milliseconds where seconds are expected
        b'{"key":"a","t":%d}' % (now_s + 7200),  # two hours ahead
        b'{"key":"a","t":%d,"x":1.5}' % now_s,  # good
        b'{"key":"a","t":%d,"x":1e400}' % now_s,  # inf measure: orjson refuses it
    ]
    out = ex.extract([Msg(v, o=i) for i, v in enumerate(values)], max_time_ms=(now_s + 3600) * 1000)
    assert out.offsets == [3] and out.measures == [1.5]
    why = {b.message.offset(): (b.error.field, b.error.reason) for b in out.bad}
    assert why[0] == ("t", "event time 1e+306 is out of range")
    assert why[1][0] == "t" and "ahead of the wall clock" in why[1][1]
    assert why[2][0] == "t" and "ahead of the wall clock" in why[2][1]
    assert why[4][0] == "value" and "not valid JSON" in why[4][1]
    # without a bound (the clamp policy) the two-hour-ahead record is good
    assert Extractor(_route()).extract([Msg(values[2])]).bad == []


def test_fast_path_bounds_kafka_timestamps_too() -> None:
    ex = Extractor(RouteSettings(raw_topic="raw"))
    now = int(time.time() * 1000)
    out = ex.extract([Msg(b'{"key":"a"}', ts=now), Msg(b'{"key":"b"}', ts=now * 1000, o=1)], max_time_ms=now + 1000)
    assert out.keys == ["a"] and [b.error.field for b in out.bad] == ["timestamp"]


def test_any_exception_of_one_record_makes_it_bad(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = Extractor(_route())

    def boom(doc: object, msg: object) -> str:
        if msg.offset() == 1:  # type: ignore[attr-defined]
            raise ZeroDivisionError("surprise")
        return "k"

    monkeypatch.setattr(ex, "_key", boom)
    out = ex.extract([Msg(b'{"t":1}', o=0), Msg(b'{"t":1}', o=1)])
    assert out.offsets == [0]
    assert "ZeroDivisionError: surprise" in str(out.bad[0].error)


def test_dead_letter_of_a_large_record_is_a_small_envelope() -> None:
    big = b"x" * 1_000_001
    bad = refused_source("raw", "raw.dlq", b"k", None, "unused")
    assert bad.message.value() is None
    b = type(bad)(SourceRecord("raw", 3, 77, b"k" * 5000, big, 5), RecordError("value", "record has 1000001 bytes"))
    dl = dead_letter("r", "raw", b, limit=1_000_000, prefix=1024)
    assert dl.truncated and dl.size == 1_000_001 and (dl.partition, dl.offset) == (3, 77)
    assert base64.b64decode(dl.value_b64 or "") == big[:1024] and base64.b64decode(dl.key_b64 or "") == b"k" * 1024
    assert len(dead_letter_bytes(dl)) < 4_000
    small = dead_letter("r", "raw", type(bad)(SourceRecord("raw", 0, 1, None, b"{}"), RecordError("value", "x")))
    assert not small.truncated and base64.b64decode(small.value_b64 or "") == b"{}"


@pytest.mark.parametrize("fmt", [1, 2])
def test_refused_routed_record_keeps_its_source_position(fmt: int) -> None:
    routed = b'{"v":1,"k":"a","t":1,"c":0,"tp":"raw","p":2,"o":9,"x":null,"d":{}}'
    if fmt == 2:
        routed = encode_routed_v2(1, 2, 9, None, b"{}")
    bad = refused_source("raw", "raw.combiners", b"a", routed, "MSG_SIZE_TOO_LARGE")
    assert (bad.message.topic(), bad.message.partition(), bad.message.offset()) == ("raw", 2, 9)
    assert "refused the routed record" in bad.error.reason
    assert bad.message.value() == (b"{}" if fmt == 2 else routed)  # format 2: the raw record, byte for byte


def test_settings_that_cannot_fit_the_producer_limit_are_refused() -> None:
    kafka, router = KafkaSettings(), RouterSettings()
    assert check_sizes(kafka, router, RouteSettings(raw_topic="raw")) == 1_000_000  # the defaults fit
    with pytest.raises(ConfigError, match=r"routes\.raw\.max_record_bytes: 1000000"):
        check_sizes(kafka, router, RouteSettings(raw_topic="raw", max_record_bytes=1_000_000))
    roomy = KafkaSettings(producer={"message.max.bytes": 2_000_000})
    assert check_sizes(roomy, router, RouteSettings(raw_topic="raw", max_record_bytes=1_000_000)) == 2_000_000


def test_exactly_once_derives_its_stable_instance_id_unless_one_is_given() -> None:
    assert RouterSettings(delivery="exactly_once").instance_id is None  # <hostname>-<slot> (router.identity)
    assert RouterSettings(delivery="exactly_once", instance_id="w1").instance_id == "w1"


def test_static_membership_is_tri_state() -> None:
    """auto by default (resolved per broker at start); true needs the instance id it joins as; bad values named."""
    from connectors.broker_traits import resolve_static_membership

    assert RouterSettings().static_membership == "auto"
    with pytest.raises(ValueError, match="static_membership=true needs a stable router.instance_id"):
        RouterSettings(static_membership=True)
    assert RouterSettings.model_validate({"static_membership": "false", "instance_id": "w"}).static_membership is False
    with pytest.raises(ValueError, match="static_membership"):
        RouterSettings.model_validate({"static_membership": "sometimes"})
    k = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # never contacted: no decision needs the broker
    assert resolve_static_membership(True, "w", k) == (True, "router.static_membership is set")
    assert resolve_static_membership("auto", None, k) == (False, "auto: no explicit router.instance_id")
    static, why = resolve_static_membership("auto", "w", KafkaSettings(bootstrap_servers="127.0.0.1:1"), 0.5)
    assert static is False and why.startswith("auto: the broker could not be detected")  # the safe side


def test_window_tracker_memory_follows_distinct_keys_in_an_open_window() -> None:
    wt = WindowTracker(4, 1000)
    rng = np.random.default_rng(1)
    space = rng.integers(0, 2**63, 1000, dtype=np.uint64)
    for _ in range(300):  # 3M records into one window that never closes (a frozen clock), 1000 distinct keys
        h = space[rng.integers(0, 1000, 10_000)]
        c = rng.integers(0, 4, 10_000).astype(np.int32)
        assert wt.observe(h, c, np.full(10_000, 5, dtype=np.int64)) == []
    held = sum(a.size for a in wt._keys) + sum(a.size for a in wt._pairs)
    assert held < 1_200_000  # not 6M (two entries per record): merged to the distinct ones regularly
    (done,) = wt.observe(np.zeros(1, np.uint64), np.zeros(1, np.int32), np.array([5000], np.int64))
    assert done.keys == 1000 and done.pairs == 4000 and int(done.loads.sum()) == 3_000_000


def test_key_cache_is_bounded_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys_mod, "MAX_CACHE_BYTES", 1 << 20)
    codec = KeyCodec(2)
    for i in range(20):
        codec.encode([f"{i}-{j}-" + "k" * 4000 for j in range(100)])  # 400 KB of new keys per batch
        assert codec._cache_bytes <= (1 << 20) + 100 * (4100 + keys_mod.ENTRY_BYTES)
        assert len(codec._cache) <= 400


def test_readiness_needs_a_join_a_recent_consume_and_no_stale_batch() -> None:
    from router.plane_health import PlaneHealth

    h = PlaneHealth(RouterMetrics("w").route("r", "hash", 2), "raw", stale_s=5.0)
    assert h.ready(False) == (False, "the data-plane thread is not running")
    assert h.ready(True)[1] == "not yet in its consumer group"
    h.joined = True
    assert "no consume()" in h.ready(True)[1]
    h.looped()
    assert h.ready(True) == (True, "ok")
    h.waiting_since = time.monotonic() - 6
    assert "waited for its commit" in h.ready(True)[1]
    assert h.commit_age() == -1.0
    h.committed()
    assert 0 <= h.commit_age() < 1 and h.snapshot()["last_commit_age_s"] < 1


@pytest.mark.parametrize("policy", ["dead_letter", "clamp"])
def test_a_far_future_record_never_moves_the_window_clock_past_the_tolerance(policy: str) -> None:
    from router.dataplane import RouteDataPlane

    route = RouteSettings.model_validate({"raw_topic": "raw", "time": {"too_far_ahead": policy}})
    plane = RouteDataPlane(KafkaSettings(), RouterSettings(), route, RouterMetrics("w"), instance_id="w")
    now = int(time.time() * 1000)
    msgs = [Msg(b'{"key":"a"}', ts=now - 5), Msg(b'{"key":"b"}', ts=now + 10 * 365 * 86_400_000, o=1)]
    ext, limit_ms = plane._extract(msgs)
    combiners = plane._assign(ext, limit_ms)
    assert plane._event_clock.now <= time.time() * 1000 + 3_600_000
    if policy == "clamp":
        assert ext.offsets == [0, 1] and combiners.size == 2 and plane._event_clock.now >= now + 3_500_000
        assert ext.times[1] == msgs[1].timestamp()[1]  # the routed record keeps its own time
    else:
        assert ext.offsets == [0] and plane._event_clock.now == now - 5 and ext.bad[0].error.field == "timestamp"
