"""Invalid settings through the CLI: ``skewroute router --config bad.yaml`` exits 2, one line per problem naming
the field path (never wrapped, whatever the terminal width), secrets masked. The table of single invalid
settings is ``tests/unit/test_settings.py::INVALID``; here its entries go through the command line at once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.test_settings import INVALID

BIN = Path(sys.executable).parent


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _fields(doc: dict) -> set[tuple[str, str]]:
    """The ``(section, field)`` pairs a settings document sets in its mapping sections."""
    return {(section, name) for section, values in doc.items() if isinstance(values, dict) for name in values}


def _run(
    config: Path, env: dict[str, str] | None = None, extra: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "skewroute"), "router", "--config", str(config), *(extra or [])],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "60", **(env or {})},
    )  # fmt: skip


def test_cli_reports_every_invalid_setting_on_one_line(tmp_path: Path) -> None:
    # the router and spark rows of the table merged into one file (one value per field), plus kafka and routes
    merged: dict = {"kafka": {"sasl_password": "hunter2", "security_protocol": "TLS"}}
    paths = ["kafka.security_protocol"]
    for overrides, path, _ in INVALID:
        assert isinstance(overrides, dict)
        # rows of a model's own check (no field path) cannot combine: pydantic runs those only on valid fields,
        # and their values would override a field row's (spark.sink: parquet over spark.sink: s3)
        # and a row setting a field an earlier row set would override it (spark.percentiles: [] over [0.5, 1.5])
        fields, taken = _fields(overrides), _fields(merged)
        if (
            set(overrides) <= {"router", "spark"}
            and path not in paths
            and re.fullmatch(r"[\w.]+", path)
            and not fields & taken
        ):
            merged = _merge(merged, overrides)
            paths.append(path)
    merged["routes"] = [{"raw_topic": "a b", "combiners": 0, "window": {"kind": "session"}}]
    paths += ["routes.0.raw_topic", "routes.0.combiners", "routes.0.window.kind"]
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(merged))
    out = _run(cfg)
    assert out.returncode == 2, out.stderr[-2000:]
    problems = [line for line in out.stderr.splitlines() if line.startswith("  - ")]
    print(f"\n{len(problems)} problems reported for {len(paths)} invalid fields; e.g. {problems[:2]}")
    for path in paths:
        hits = [p for p in problems if p.startswith(f"  - {path}: ") or p.startswith(f"  - {path}.")]
        assert hits, (path, problems)
    assert all(len(line) > 60 for line in problems[:3])  # longer than the terminal: not wrapped
    assert "hunter2" not in out.stderr + out.stdout and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("text", "suffix", "want"),
    [
        ("routes: [{raw_topic: a, partitioner: {name: nope}}]\n", ".yaml", "  - routes.0.partitioner: "),
        ("routes: [{raw_topic: a\n", ".yaml", "  - config: "),  # YAML syntax
        ('[[routes]]\nraw_topic = "a"\ncombiners = "many"\n', ".toml", "  - routes.0.combiners: "),
        ("{}", ".json", "  - config: "),
    ],
    ids=["unknown-partitioner", "yaml-syntax", "toml-type", "bad-suffix"],
)
def test_cli_config_file_errors(tmp_path: Path, text: str, suffix: str, want: str) -> None:
    cfg = tmp_path / f"c{suffix}"
    cfg.write_text(text)
    out = _run(cfg)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert sum(1 for line in out.stderr.splitlines() if line.startswith(want)) == 1, out.stderr


def test_cli_environment_errors_name_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("routes: [{raw_topic: a}]\n")
    out = _run(cfg, {"SKEWROUTE_ROUTER__DELIVERY": "maybe"})
    assert out.returncode == 2
    assert [x for x in out.stderr.splitlines() if x.startswith("  - ")] == [
        "  - router.delivery: Input should be 'at_least_once' or 'exactly_once' (got 'maybe')"
    ]


def test_cli_refuses_records_that_cannot_fit_the_producer_limit(tmp_path: Path) -> None:
    cfg = tmp_path / "big.yaml"
    cfg.write_text("routes: [{raw_topic: a, max_record_bytes: 1000000}]\n")
    out = _run(cfg)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "routes.a.max_record_bytes: 1000000" in out.stderr and "message.max.bytes" in out.stderr, out.stderr
    # exactly_once no longer needs a hand-typed instance id (derived from the worker's slot): the settings pass
    cfg.write_text("routes: [{raw_topic: a}]\nrouter: {delivery: exactly_once}\n")
    out = _run(cfg, extra=["--broker-wait", "0"])
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr  # on to the broker check
