"""Issue 29's shipped paths are safe as written: no silent loss under ``--once``, exact after one router crash.

Each test runs what a new user runs (the CLI, the shipped configs, the starter ``init`` writes) and checks the
outcome they see, without a broker or a JVM: the refusals happen before either is reached.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from typer.testing import CliRunner

from router.choose.detect import detect_fields
from router.choose.starter import Starter, render_starter
from router.cli import app
from schemas.settings import SkewrouteSettings
from spark_consumers.job import resolve_dedupe
from tests.unit.test_choose import sample

ROOT = Path(__file__).resolve().parents[2]
SUMS = ROOT / "deploy" / "configs" / "sums-with-measure.yaml"


def _starter_text() -> str:
    d = detect_fields(sample())
    return render_starter(Starter("h:1", "t", d, d.keys[0], d.times[0], d.measures[0], "hash", "because"))


def test_once_with_an_append_sink_is_refused_naming_the_setting() -> None:
    # Item 1: append (parquet) + --once used to read everything and leave the last windows unwritten.
    res = CliRunner().invoke(app, ["spark-job", "--config", str(SUMS), "--once", "--broker-wait", "0"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert any("spark.output_mode" in ln and "--once" in ln for ln in lines), res.output
    assert len(lines) <= 3 and "Traceback" not in res.output


def test_dedupe_is_on_by_default_and_off_only_with_transactional_routers() -> None:
    # Item 2: at-least-once routers + no dedupe double-counted a killed worker's replays.
    assert resolve_dedupe(SkewrouteSettings.load()) is True
    eos = SkewrouteSettings.load(router={"delivery": "exactly_once", "instance_id": "w0"})
    assert resolve_dedupe(eos) is False
    assert resolve_dedupe(SkewrouteSettings.load(spark={"dedupe": False})) is False  # an explicit choice stands


def test_shipped_configs_starter_and_compose_are_exact_after_one_crash(tmp_path: Path) -> None:
    for path in sorted((ROOT / "deploy" / "configs").glob("*.yaml")):
        s = SkewrouteSettings.load(path)
        assert s.router.delivery == "exactly_once" or resolve_dedupe(s), path.name
    starter = tmp_path / "starter.yaml"
    starter.write_text(_starter_text())
    assert resolve_dedupe(SkewrouteSettings.load(starter))
    assert re.search(r"dedupe.*\n.*source position", _starter_text())  # says which, and why
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    env = compose["services"]["spark-job"].get("environment", {})
    assert str(env.get("SKEWROUTE_SPARK__DEDUPE", "auto")).lower() in ("auto", "true")
