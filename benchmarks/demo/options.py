"""What one demo run is made of: the options, and the settings of each partitioner's pipeline.

Every partitioner runs the same pipeline on its own topics (``<prefix>-<partitioner>.raw`` and the route's
derived topics), its own consumer group, control topic and Spark checkpoint, so the runs never see each
other's records. The settings are written to ``<out>/<partitioner>/config.yaml`` and the router workers and
the Spark job are started on that file, exactly as an operator would start them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from schemas.settings import SkewrouteSettings

__all__ = ["DEFAULT_WORKLOAD", "DemoOptions", "RunPlan", "plan_run"]

#: Zipf 1.5 over 10k keys whose hot set changes halfway (the key ranks are permuted at 50% of the stream).
DEFAULT_WORKLOAD = "evolving:s=1.5,keys=10000,at=0.5"
RAW_PARTITIONS = 4  # >= routers, so every router worker owns raw partitions
KEY_FIELD, TIME_FIELD, VALUE_FIELD = "key", "ts", "value"


@dataclass(frozen=True)
class DemoOptions:
    """The demo's knobs (the CLI options of ``skewroute demo``)."""

    workload: str = DEFAULT_WORKLOAD
    records: int = 60_000
    rate: float = 2_500.0  # records per second produced; 0 = as fast as possible
    partitioner: str = "dalton"
    baseline: str = "hash"
    routers: int = 2
    combiners: int = 8
    reducers: int = 4
    window_s: int = 10  # Spark aggregation window (tumbling, event time)
    watermark_s: int = 60  # generous: a record is never late, so the results must be exact
    trigger_s: float = 2.0
    slide_ms: int = 2_000  # the route's slide = the Spark trigger: Dalton's scope, the report's metric window
    bootstrap: str | None = None
    out: Path = Path("reports/demo")
    seed: int = 1
    timeout_s: float = 600.0  # per partitioner run: longest wait for the pipeline to drain
    live: bool = True
    cluster: bool = False  # Spark on a local standalone cluster (master + 2 workers x 1 core) instead of local[2]
    spark_master: str = "local[2]"  # set by the runner to the started cluster's URL

    @property
    def labels(self) -> tuple[str, ...]:
        """The partitioners to run, chosen first."""
        return (self.partitioner,) if self.partitioner == self.baseline else (self.partitioner, self.baseline)


@dataclass(frozen=True)
class RunPlan:
    """One partitioner's pipeline: its folder, config file, settings and ports."""

    label: str
    folder: Path
    config: Path
    settings: SkewrouteSettings
    web_ports: tuple[int, ...]

    @property
    def route(self) -> Any:
        """The run's only route."""
        return self.settings.routes[0]

    @property
    def results_topic(self) -> str:
        """Where the Spark job writes the final aggregates."""
        return self.settings.spark.results_topic or f"{self.route.raw_topic}.results"

    @property
    def progress_log(self) -> Path:
        """The Spark job's per-batch observability log."""
        return self.settings.spark.progress_log


def plan_run(
    opts: DemoOptions, label: str, prefix: str, bootstrap: str, web_ports: tuple[int, ...], tag: str | None = None
) -> RunPlan:
    """Settings for partitioner ``label`` (``name`` or ``name:k=v,...``), written to its config file.

    ``tag`` names the run's folder and topics (default: the label).
    """
    name, _, rest = label.partition(":")
    part: dict[str, Any] = {"name": name}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        part[k] = yaml.safe_load(v)
    if name == "dalton" and opts.routers > 1:  # the routers read the same keys (raw partitions round-robin)
        part.setdefault("routers", opts.routers)
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in (tag or label))
    folder = (opts.out / safe).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # a reused --out must not resume an old query
    (folder / "progress.jsonl").unlink(missing_ok=True)
    raw = f"{prefix}-{safe}.raw"
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap},
        "routes": [
            {
                "raw_topic": raw,
                "name": f"demo-{safe}",
                "combiners": opts.combiners,
                "key": {"source": "field", "field": KEY_FIELD},
                "time": {"source": "field", "field": TIME_FIELD, "unit": "ms"},
                "value_field": VALUE_FIELD,
                "window": {"kind": "time", "size": 12 * opts.slide_ms, "slide": opts.slide_ms},
                "partitioner": part,
                "seed": opts.seed,
            }
        ],
        "router": {
            "app_id": f"{prefix}-{safe}",
            "control_topic": f"{prefix}-{safe}.control",
            "state_dir": str(folder / "router-state"),
            "log_format": "text",
            "log_level": "WARNING",
        },
        "spark": {
            "master": opts.spark_master,
            "trigger_interval": f"{opts.trigger_s:g} seconds",
            "window": f"{opts.window_s} seconds",
            "watermark": f"{opts.watermark_s} seconds",
            "sink": "kafka",
            "dedupe": False,  # no worker is killed here; the demo measures the combiners' pre-aggregation
            "shuffle_partitions": opts.reducers,
            "checkpoint_dir": str((folder / "checkpoints").resolve()),  # absolute: a cluster master needs it
            "progress_log": str(folder / "progress.jsonl"),
            "conf": {"spark.ui.enabled": "false", "spark.sql.adaptive.enabled": "false"},
        },
    }
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    settings = SkewrouteSettings.load(config)
    return RunPlan(label, folder, config, settings, web_ports)
