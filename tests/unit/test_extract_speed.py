"""``python -m benchmarks.extract_speed`` runs, and its three paths extract the same records."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import extract_speed


def test_report_has_a_row_per_shape_size_and_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract_speed, "RECORDS", 2_000)
    monkeypatch.setattr(extract_speed, "BATCHES", (500, 2_000))
    extract_speed.main(["--rounds", "1", "--out", str(tmp_path)])
    rows = [ln for ln in (tmp_path / "extract-speed.md").read_text().splitlines() if ln.startswith("| ")]
    shapes = [r for r in rows if r.split(" | ")[0].lstrip("| ") in extract_speed.SHAPES]
    assert len(shapes) == 2 * len(extract_speed.SHAPES)
    assert [r.split(" | ")[0] for r in rows if r.startswith(("| 500 ", "| 2,000 "))] == ["| 500", "| 2,000"]


@pytest.mark.parametrize("shape", list(extract_speed.SHAPES))
def test_the_three_paths_agree(shape: str) -> None:
    msgs = extract_speed.messages(1_200, 0)
    outs = [run(msgs) for run in extract_speed._paths(extract_speed._route(extract_speed.SHAPES[shape]))]
    fields = ("keys", "times", "measures", "values", "partitions", "offsets")
    first = [getattr(outs[0], f) for f in fields]
    assert len(first[0]) == 1_200
    assert all([getattr(o, f) for f in fields] == first for o in outs[1:])
