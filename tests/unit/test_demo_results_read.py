"""The demo's read of the results topic: read again while expected results are missing, and say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.demo import pipeline
from benchmarks.demo.options import DemoOptions, plan_run
from benchmarks.topic_reader import TopicRecord


def _record(offset: int, key: bytes, count: int) -> TopicRecord:
    return TopicRecord(0, offset, key, orjson.dumps({"count": count}), 0)


@pytest.fixture
def plan(tmp_path: Path) -> Any:
    return plan_run(DemoOptions(out=tmp_path), "hash", "t", "127.0.0.1:9", ())


def test_a_short_read_is_read_again_until_every_expected_result_is_there(
    plan: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = [_record(0, b"a", 1), _record(1, b"b", 1), _record(2, b"a", 2)]
    reads = iter([full[:1], full[:2], full])
    monkeypatch.setattr(pipeline, "read_topic", lambda *_a, **_k: next(reads))
    results, missing = pipeline.read_results(plan, frozenset({b"a", b"b"}), reads=3, pause_s=0)
    assert missing == [1, 0]  # the first read lacked b; the second had everything
    assert results == {b"a": {"count": 1}, b"b": {"count": 1}}  # the second (complete) read: no third


def test_results_that_never_arrive_stay_missing_after_every_read(plan: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def read(*_a: Any, **_k: Any) -> list[TopicRecord]:
        calls.append(1)
        return [_record(0, b"a", 3)]

    monkeypatch.setattr(pipeline, "read_topic", read)
    results, missing = pipeline.read_results(plan, frozenset({b"a", b"b"}), reads=3, pause_s=0)
    assert missing == [1, 1, 1] and len(calls) == 3
    assert results == {b"a": {"count": 3}}


def test_one_read_when_nothing_is_expected_or_everything_is_there(plan: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "read_topic", lambda *_a, **_k: [_record(0, b"a", 1)])
    assert pipeline.read_results(plan, frozenset(), pause_s=0)[1] == [0]
    assert pipeline.read_results(plan, frozenset({b"a"}), pause_s=0)[1] == [0]
