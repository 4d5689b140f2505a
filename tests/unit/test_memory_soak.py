"""The memory-soak command (benchmarks.memory_soak) on a small input: the far-future record is dead-lettered
and the window clock stays at the wall clock; without the bound the clock freezes ten years ahead."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.memory_soak import main, run_one


def test_far_future_record_is_dead_lettered_and_the_clock_stays_bounded() -> None:
    on = run_one("dalton", 60_000, 20_000, batch=5_000, samples=4)
    assert on.dead_lettered == 1 and -600 < on.clock_ahead_s < 0  # the clock follows the simulated stream
    off = run_one("dalton", 60_000, 20_000, batch=5_000, samples=4, bounded=False)
    assert off.dead_lettered == 0 and off.clock_ahead_s > 9 * 365 * 86_400  # frozen ten years ahead
    assert len(on.rss_mb) >= 4 and all(mb > 0 for _, mb in on.rss_mb)


def test_command_writes_the_report(tmp_path: Path) -> None:
    rc = main(["--tuples", "20000", "--keys", "5000", "--batch", "5000", "--partitioners", "hash",
               "--unbounded", "hash", "--samples", "2", "--out", str(tmp_path)])  # fmt: skip
    rows = json.loads((tmp_path / "memory_soak.json").read_text())
    assert [(r["partitioner"], r["bounded"]) for r in rows] == [("hash", True), ("hash", False)]
    assert rc in (0, 1) and rc == (0 if rows[0]["plateau"] else 1)
    assert "| hash | on |" in (tmp_path / "memory_soak.md").read_text()
