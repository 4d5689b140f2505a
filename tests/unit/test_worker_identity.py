"""Several router workers per host from one config: each derives its slot, instance id and loopback web port."""

from __future__ import annotations

import socket
from pathlib import Path

from router.app import create_app
from router.identity import BASE_WEB_PORT, claim_slot, free_web_port
from schemas.settings import SkewrouteSettings
from tests.unit.test_safe_defaults import _starter_text


def test_slots_are_the_lowest_free_and_come_back_after_a_worker_dies(tmp_path: Path) -> None:
    a, b = claim_slot(tmp_path), claim_slot(tmp_path)
    assert (a.index, b.index) == (0, 1)
    a.release()  # what the kernel does when a worker is killed
    again = claim_slot(tmp_path)
    assert again.index == 0 and again.instance_id("h") == "h-0"  # the restarted worker keeps its id
    assert claim_slot(tmp_path).index == 2


def test_derived_port_skips_a_taken_one() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        slot = taken - BASE_WEB_PORT
        if slot >= 0:
            assert free_web_port("127.0.0.1", slot) > taken
    assert free_web_port("127.0.0.1", 0) >= BASE_WEB_PORT


def test_two_workers_from_one_starter_get_their_own_loopback_port_and_id(tmp_path: Path) -> None:
    starter = tmp_path / "starter.yaml"
    starter.write_text(_starter_text())
    settings = SkewrouteSettings.load(starter, router={"state_dir": str(tmp_path / "state")})
    assert settings.router.web_port is None and settings.router.web_host == "127.0.0.1"
    assert "web_port" not in _starter_text().split("router:")[1].split("spark:")[0].replace("router.web_port", "")
    one, two = create_app(settings), create_app(settings)
    try:
        assert one.conf.web_bind == two.conf.web_bind == "127.0.0.1"
        assert one.conf.web_port != two.conf.web_port
        assert one.skewroute.instance_id != two.skewroute.instance_id  # type: ignore[attr-defined]
    finally:
        for app in (one, two):
            app.skewroute.slot.release()  # type: ignore[attr-defined]
