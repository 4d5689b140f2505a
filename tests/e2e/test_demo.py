"""``skewroute demo`` end to end: a shortened run as a user runs it, then its report's numbers are checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.demo.report import ROWS

pytestmark = [pytest.mark.slow, pytest.mark.kafka, pytest.mark.spark]

RECORDS = 12_000


def _table(markdown: str) -> dict[str, list[str]]:
    """The comparison table: row label -> cells (header row under the key ``""``)."""
    rows: dict[str, list[str]] = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def _number(cell: str) -> tuple[float, float]:
    """A formatted cell's value and half a unit of its last shown digit."""
    text = cell.replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), 0.5 * 10**-decimals


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("demo") / "report"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    cmd = [sys.executable, "-c", "from router.cli import main; main()", "demo", "--quick",
           "--records", str(RECORDS), "--out", str(out), "--no-live"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return out, json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def test_report_files_exist(demo_report: tuple[Path, dict[str, Any], str]) -> None:
    out, _, markdown = demo_report
    for png in ("routing/load.png", "routing/replication.png", "spark.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"]({png})" in markdown
    assert (out / "routing" / "result.json").is_file()


def test_both_partitioners_routed_every_record(demo_report: tuple[Path, dict[str, Any], str]) -> None:
    _, doc, _ = demo_report
    assert list(doc["runs"]) == ["dalton", "hash"]
    for label, run in doc["runs"].items():
        d = run["delivery"]
        assert d["produced"] == RECORDS, label
        assert d["routed_records"] == d["distinct_positions"] == d["worker_routed"] == RECORDS, (label, d)
        assert d["duplicates"] == d["dead_letters"] == 0, (label, d)
        assert run["spark"]["input_rows"] == RECORDS, label
        assert run["spark"]["batches"] >= 1 and run["spark"]["shuffled_partials"] > 0, label
        assert run["throughput"]["records_per_s"] > 0, label


def test_final_aggregates_are_exact(demo_report: tuple[Path, dict[str, Any], str]) -> None:
    _, doc, _ = demo_report
    for label, run in doc["runs"].items():
        e = run["exactness"]
        assert e["exact"] and e["wrong"] == 0 and e["examples"] == [], (label, e)
        assert e["expected"] == e["matching"] == e["got"] > 0, (label, e)


def test_dalton_balances_better_than_hash(demo_report: tuple[Path, dict[str, Any], str]) -> None:
    _, doc, _ = demo_report
    dalton, hashed = doc["runs"]["dalton"]["routing"], doc["runs"]["hash"]["routing"]
    assert dalton["ratio_mean"] < hashed["ratio_mean"], (dalton, hashed)
    assert hashed["replication_mean"] == 1.0  # hash never splits a key


def test_markdown_says_what_the_json_says(demo_report: tuple[Path, dict[str, Any], str]) -> None:
    _, doc, markdown = demo_report
    table = _table(markdown)
    labels = list(doc["runs"])
    assert table[""] == labels
    for row, section, key, _fmt in ROWS:
        assert row in table, row
        for label, cell in zip(labels, table[row], strict=True):
            want = doc["runs"][label][section][key]
            if want is None:
                assert cell == "n/a", (row, label)
                continue
            got, tol = _number(cell)
            assert abs(got - want) <= tol + 1e-9, (row, label, cell, want)
    m = re.search(r"([\d,]+) JSON records", markdown)
    assert m is not None and int(m.group(1).replace(",", "")) == doc["demo"]["records"] == RECORDS
