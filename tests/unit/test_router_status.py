"""``skewroute status``: scraping a worker's /metrics and rendering it; credentials never shown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from router.commands.worker import _tables, redact_url, scrape, scrape_worker
from router.observability import RouterMetrics, WindowStats


def _with_sync(m: RouterMetrics) -> None:
    """Two real sync nodes (300 ms apart) run a few rounds ending 1 s ago; the worker's collector reads node 0."""
    from router.sync.kafka import wall_ms
    from router.sync.service import DaltonSyncService
    from tests.unit.test_sync_skew import SkewedCluster

    service = DaltonSyncService(SimpleNamespace(metrics=m))
    c = SkewedCluster([0.0, 300.0])
    base = wall_ms() - 9_000
    for k in range(40):  # 8 s of rounds at 200 ms steps
        c.step(base + 200.0 * (k + 1))
    node = c.nodes[0]
    node.stats.ignored["foreign"] = 2
    service.transport = SimpleNamespace(healthy=True, errors=3, restarts=1, nodes={"clicks": node})  # type: ignore[assignment]


@pytest.fixture
def metrics_url() -> Iterator[str]:
    m = RouterMetrics("w-7")
    r = m.route("clicks", "dalton", 3)
    r.tuples_in.inc(1000)
    r.tuples_out.inc(990)
    r.dead_lettered("value")
    r.batch_seconds.observe(0.02)
    r.windows_done([WindowStats(0, np.array([10, 20, 30]), keys=5, pairs=6)])
    r.partition_lag(0, 4_000)
    r.partition_lag(3, 321)
    _with_sync(m)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = m.exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/metrics"
    finally:
        srv.shutdown()


def test_scrape_reads_route_metrics(metrics_url: str) -> None:
    v = scrape(metrics_url)["clicks"]
    assert v.partitioner == "dalton" and v.instance == "w-7"
    assert v.values["skewroute_tuples_in_total"] == 1000 and v.dead == {"value": 1.0, "key": 0.0, "timestamp": 0.0}
    assert v.loads == {0: 10, 1: 20, 2: 30}
    assert v.values["skewroute_window_replication"] == pytest.approx(1.2)
    assert v.values["skewroute_consumer_lag"] == 4_321
    assert v.values["skewroute_sync_members"] == 2 and v.values["skewroute_sync_round_size"] == 2
    assert 0.5 < v.values["skewroute_sync_last_global_age_seconds"] < 60  # the last round closed ~1-2 s ago
    assert v.values["skewroute_sync_ignored_total"] == 2
    _, worker = scrape_worker(metrics_url)
    assert worker == {"skewroute_sync_transport_up": 1.0, "skewroute_sync_transport_errors_total": 3.0,
                      "skewroute_sync_transport_restarts_total": 1.0}  # fmt: skip


def test_table_renders_and_hides_credentials(metrics_url: str) -> None:
    secret_url = metrics_url.replace("http://", "http://admin:hunter2@")
    console = Console(width=200, record=True)
    console.print(_tables([metrics_url, secret_url], {}))
    text = console.export_text()
    assert "clicks (dalton)" in text and "1,000" in text and "1.50" in text  # max/mean of loads 10, 20, 30
    assert "4,321" in text  # consumer lag summed over the worker's raw partitions
    assert text.count("clicks (dalton)") == 2 and "http://***@127.0.0.1" in text  # basic auth, URL redacted
    assert text.count("sync transport up, 3 errors, 1 restarts") == 2
    sync_row = next(line for line in text.splitlines() if line.startswith("│ clicks ") and "(dalton)" not in line)
    cells = [c.strip() for c in sync_row.strip("│ ").split("│")]
    assert cells[0] == "clicks" and cells[2:4] == ["2", "2"] and cells[-1] == "2"  # round, members, ignored
    assert cells[1].endswith(" s") and 0.5 < float(cells[1][:-2]) < 60  # last GLOBAL age
    console.print(_tables(["http://u:hunter2@127.0.0.1:1/metrics"], {}))
    text = console.export_text()
    assert "unreachable" in text and "hunter2" not in text
    assert "hunter2" not in text and "admin" not in text
    assert redact_url("http://u:p@h:1/metrics") == "http://***@h:1/metrics"


def test_status_once_piped_keeps_every_cell_whole(metrics_url: str) -> None:
    """Outside a terminal (a pipe, a file, CI) ``status --once`` is not cut to 80 columns."""
    import subprocess
    import sys
    from pathlib import Path

    skewroute = str(Path(sys.executable).with_name("skewroute"))
    res = subprocess.run([skewroute, "status", "--once", "--url", metrics_url], capture_output=True, text=True,
                         timeout=60, env={"PATH": "/usr/bin:/bin", "TERM": "dumb"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout, res.stdout
    row = next(line for line in res.stdout.splitlines() if "clicks (dalton)" in line)
    assert "4,321" in row and "1,000" in row  # the route's whole row on one line
    assert metrics_url in res.stdout
