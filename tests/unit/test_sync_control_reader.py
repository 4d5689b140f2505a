"""The Dalton control reader: its fetch wait per broker, and a pump that wakes on a message, not on a timeout."""

from __future__ import annotations

import time
from typing import Any

import pytest

import connectors.broker_traits as traits_mod
from connectors.broker_traits import BrokerTraits, resolve_fetch_wait
from router.sync.kafka import KAFKA_FETCH_WAIT_MS, TANSU_FETCH_WAIT_MS, KafkaSyncTransport
from schemas.router_settings import RouterSettings
from schemas.settings import KafkaSettings

K = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # never contacted unless a test says so


def _resolve(setting: int | str, timeout: float = 10.0) -> tuple[int, str]:
    return resolve_fetch_wait(setting, K, quick_ms=TANSU_FETCH_WAIT_MS, usual_ms=KAFKA_FETCH_WAIT_MS, timeout=timeout)


def test_the_setting_is_auto_by_default_and_names_a_bad_value() -> None:
    assert RouterSettings().control_fetch_wait_ms == "auto"
    assert RouterSettings(control_fetch_wait_ms=250).control_fetch_wait_ms == 250
    with pytest.raises(ValueError, match="control_fetch_wait_ms=0: expected an integer >= 1 or auto"):
        RouterSettings(control_fetch_wait_ms=0)
    with pytest.raises(ValueError, match="control_fetch_wait_ms"):
        RouterSettings.model_validate({"control_fetch_wait_ms": "soon"})


WAITS = [("tansu", TANSU_FETCH_WAIT_MS), ("apache", KAFKA_FETCH_WAIT_MS), ("unknown", KAFKA_FETCH_WAIT_MS)]


@pytest.mark.parametrize(("kind", "wait"), WAITS)
def test_auto_waits_briefly_only_on_a_broker_that_holds_fetches(
    monkeypatch: pytest.MonkeyPatch, kind: str, wait: int
) -> None:
    monkeypatch.setattr(traits_mod, "detect_broker", lambda kafka, timeout: BrokerTraits(kind, "c", 1))  # type: ignore[arg-type]
    got, why = _resolve("auto")
    assert got == wait and why.startswith(f"auto: the broker is {kind}")


def test_a_set_wait_is_kept_and_an_undetected_broker_gets_the_short_one() -> None:
    assert _resolve(40) == (40, "set")  # no broker asked
    with pytest.raises(ValueError, match="expected an integer >= 1 or auto, got 0"):
        _resolve(0)
    got, why = _resolve("auto", timeout=0.5)
    assert got == TANSU_FETCH_WAIT_MS and why.startswith("auto: the broker could not be detected")


class _Msg:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"r"


class _Reader:
    """``poll`` returns the first queued message at once (or waits its timeout); ``consume(n, 0)`` the rest."""

    def __init__(self, queued: list[_Msg]) -> None:
        self.queued = queued
        self.calls: list[tuple[str, float]] = []

    def poll(self, timeout: float) -> _Msg | None:
        self.calls.append(("poll", timeout))
        if self.queued:
            return self.queued.pop(0)
        time.sleep(timeout)
        return None

    def consume(self, n: int, timeout: float) -> list[_Msg]:
        self.calls.append(("consume", timeout))
        out, self.queued = self.queued[:n], self.queued[n:]
        return out


class _Producer:
    def poll(self, timeout: float) -> int:
        return 0


class _Node:
    def __init__(self, dsync: float) -> None:
        self.dsync = dsync
        self.got: list[bytes | None] = []
        self.ticks = 0

    def receive_raw(self, raw: bytes | None, now: float) -> list[Any]:
        self.got.append(raw)
        return []

    def tick(self, now: float) -> list[Any]:
        self.ticks += 1
        return []


def _transport(node: _Node, reader: _Reader, poll_s: float | None = None) -> KafkaSyncTransport:
    t = KafkaSyncTransport(K, "ctl", [], poll_s=poll_s)
    t.nodes = {"r": node}  # type: ignore[dict-item]
    t._reader, t._producer = reader, _Producer()
    return t


def test_pump_returns_when_a_message_arrives_not_when_the_wait_ends() -> None:
    node = _Node(1000.0)
    reader = _Reader([_Msg(b"a"), _Msg(b"b"), _Msg(b"c")])
    t = _transport(node, reader)
    t0 = time.perf_counter()
    assert t.pump(5.0) == 3  # the first message by poll, the two queued behind it without a wait
    assert time.perf_counter() - t0 < 1.0
    assert node.got == [b"a", b"b", b"c"] and node.ticks == 1
    assert reader.calls == [("poll", 5.0), ("consume", 0)]
    reader.calls.clear()
    assert t.pump(0.01) == 0 and node.ticks == 2  # nothing: waits the timeout, then ticks
    assert reader.calls == [("poll", 0.01)]
    reader.calls.clear()
    assert t.pump(0.0) == 0 and reader.calls == [("consume", 0)]  # no wait at all: what the tests' lock-step uses


def test_the_tick_follows_the_shortest_dsync_within_bounds() -> None:
    node = _Node(1000.0)
    t = _transport(node, _Reader([]))
    assert t.tick_s() == pytest.approx(0.05)  # DSYNC 1 s: at most 50 ms late
    node.dsync = 250.0
    assert t.tick_s() == pytest.approx(0.025)
    node.dsync = 10.0
    assert t.tick_s() == pytest.approx(0.005)
    assert _transport(node, _Reader([]), poll_s=0.2).tick_s() == 0.2  # given: kept
