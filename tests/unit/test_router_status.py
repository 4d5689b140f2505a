"""``skewroute status``: scraping a worker's /metrics and rendering it; credentials never shown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from rich.console import Console

from router.commands.worker import _tables, redact_url, scrape
from router.observability import RouterMetrics, WindowStats


@pytest.fixture
def metrics_url() -> Iterator[str]:
    m = RouterMetrics("w-7")
    r = m.route("clicks", "dalton", 3)
    r.tuples_in.inc(1000)
    r.tuples_out.inc(990)
    r.dead_lettered("value")
    r.batch_seconds.observe(0.02)
    r.window_done(WindowStats(0, np.array([10, 20, 30]), keys=5, pairs=6))
    r.partition_lag(0, 4_000)
    r.partition_lag(3, 321)

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


def test_table_renders_and_hides_credentials(metrics_url: str) -> None:
    secret_url = metrics_url.replace("http://", "http://admin:hunter2@")
    console = Console(width=200, record=True)
    console.print(_tables([metrics_url, secret_url], {}))
    text = console.export_text()
    assert "clicks (dalton)" in text and "1,000" in text and "1.50" in text  # max/mean of loads 10, 20, 30
    assert "4,321" in text  # consumer lag summed over the worker's raw partitions
    assert text.count("clicks (dalton)") == 2 and "http://***@127.0.0.1" in text  # basic auth, URL redacted
    console.print(_tables(["http://u:hunter2@127.0.0.1:1/metrics"], {}))
    text = console.export_text()
    assert "unreachable" in text and "hunter2" not in text
    assert "hunter2" not in text and "admin" not in text
    assert redact_url("http://u:p@h:1/metrics") == "http://***@h:1/metrics"
