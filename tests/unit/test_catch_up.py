"""When the data plane tells a partitioner it is catching up on a backlog (router.plane_clock.CatchUp)."""

from __future__ import annotations

from router.plane_clock import CatchUp


def test_catching_up_needs_the_window_clock_behind_and_faster_than_wall_clock() -> None:
    up = CatchUp(behind_ms=2_000, pace=2.0, span_s=1.0, settle_s=0.05)
    wall, clock = 1_000_000_000, 900_000_000  # a day behind
    assert up.update(wall, clock) is True  # no pace yet: a clock a day behind at the start is a catch-up
    assert up.update(wall + 20, clock + 30) is True  # under settle_s: the last judgement holds
    assert up.update(wall + 100, clock + 60) is True  # slow for 0.1 s: a wait, not yet a span at wall clock's pace
    assert up.update(wall + 200, clock + 60_000) is True  # 60 s of event time in 0.2 s
    assert up.update(wall + 1_100, clock + 61_000) is True  # 61 s in 1.1 s since the anchor: the anchor moves
    assert up.update(wall + 1_600, clock + 61_500) is True  # at wall clock's pace for half a span: still catching up
    assert up.update(wall + 2_200, clock + 62_100) is False  # a whole span at wall clock's pace: live
    assert up.update(wall + 2_300, clock + 70_000) is True  # fast again: catching up at once
    live = CatchUp(behind_ms=2_000, pace=2.0, span_s=1.0, settle_s=0.05)
    assert live.update(wall, clock) is True  # late event times: taken as a catch-up until the pace is known
    assert live.update(wall + 500, clock + 500) is True
    assert live.update(wall + 1_000, clock + 1_000) is False  # a whole span at wall clock's pace: a late source
    near = CatchUp(behind_ms=2_000)
    near.update(wall, wall - 60_000)
    assert near.update(wall + 100, wall - 1_000) is False  # fast, but within two slides of wall clock
