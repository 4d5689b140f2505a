"""Routed wire formats through a real data plane: both formats on one combiner topic, read record by record.

The records are large enough (>= 128 bytes) for format 2's vectorized extraction. A format-2 worker with the
compact prefix, one with the wide prefix (``routed_compact: false``) and a format-1 worker route successive
records of the same raw topic into the same combiner topic, as during a rolling upgrade.
"""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from schemas.records import routed_version
from schemas.settings import KafkaSettings
from tests.integration.router_support import produce, routed, run_plane, settings

pytestmark = pytest.mark.kafka

N = 2000


def _records(start: int, n: int) -> list[tuple[bytes | None, bytes]]:
    pad = "p" * 150
    return [(None, orjson.dumps({"key": f"k{i % 37}", "i": i, "pad": pad})) for i in range(start, start + n)]


def test_formats_2_then_1_on_one_topic_deliver_every_record_once(kafka: KafkaSettings, topic: str) -> None:
    first, wide, second = _records(0, N), _records(N, N // 2), _records(N + N // 2, N // 2)
    produce(kafka, topic, first)
    s2 = settings(kafka, topic, f"app-{topic}", router={"routed_format": 2})
    assert run_plane(s2, N).stats.routed == N
    produce(kafka, topic, wide)  # the same group goes on from the commit each time
    s2w = settings(kafka, topic, f"app-{topic}", router={"routed_format": 2, "routed_compact": False})
    assert run_plane(s2w, N // 2).stats.routed == N // 2
    produce(kafka, topic, second)
    s1 = settings(kafka, topic, f"app-{topic}", router={"routed_format": 1})
    assert run_plane(s1, N // 2).stats.routed == N // 2

    out = routed(kafka, s2.routes[0].combiner_topic_name, expected=2 * N)
    versions = Counter(routed_version(r.value) for r, _ in out)
    assert versions == {2: N + N // 2, 1: N // 2}
    assert Counter((r.value or b"{")[0] for r, _ in out) == {0x22: N, 0x02: N // 2, ord("{"): N // 2}
    sent = {orjson.loads(v)["i"]: v for _, v in first + wide + second}
    got = {}
    for rec, d in out:
        assert rec.partition == d["c"] and rec.key == d["k"].encode() and d["tp"] == topic
        got[d["d"]["i"]] = d
        if routed_version(rec.value) == 2:
            assert (rec.value or b"").endswith(sent[d["d"]["i"]])  # the raw bytes, untouched
    assert sorted(got) == sorted(sent)  # every record once, none lost
    assert len({(d["p"], d["o"]) for d in got.values()}) == 2 * N
