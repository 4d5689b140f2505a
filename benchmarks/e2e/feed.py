"""The input side of an end-to-end run: the keyed producer and the router workers.

:class:`KeyedProducer` produces the seeded input to the raw topic with the record key as Kafka key
(librdkafka ``murmur2_random``: the Java client's default partitioning) and stamps the wall-clock time each
record was handed to the client (the start of its end-to-end latency). :class:`Routers` starts router worker
processes on a settings file, waits until they own every raw partition, and reads their CPU time and counters.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from benchmarks.demo.processes import Child, Processes, router_command
from benchmarks.demo.source import DemoInput, Producer
from benchmarks.e2e.measures import tree_cpu_seconds
from benchmarks.e2e.plan import RunSpec
from connectors.kafka import make_producer, produce_waiting
from schemas.exceptions import SkewrouteError
from schemas.settings import KafkaSettings

__all__ = ["KeyedProducer", "Routers", "encode_raw"]


def encode_raw(data: DemoInput) -> list[bytes]:
    """``{"k": key, "t": event ms, "x": measure}`` per record (the routed wire format's field names)."""
    return data.encoded(("k", "t", "x"))


class KeyedProducer(Producer):
    """The demo's rate-limited producer thread, keyed and hash-partitioned, with per-record send times."""

    def __init__(self, kafka: KafkaSettings, topic: str, data: DemoInput, rate: float) -> None:
        super().__init__(kafka, topic, data, rate)
        self.sent_s: npt.NDArray[np.float64] = np.full(len(data), np.nan)

    def _encode(self, data: DemoInput) -> list[bytes]:
        return encode_raw(data)

    tick_s = 0.005
    flush_s = 120.0

    def _client(self) -> Any:
        return make_producer(self.kafka, **{"linger.ms": 5, "partitioner": "murmur2_random"})

    def _send(self, producer: Any, i: int, key: bytes) -> None:
        produce_waiting(producer, self.topic, self.values[i], key)  # keyed: the client hash-partitions

    def _sent_upto(self, lo: int, hi: int) -> None:
        self.sent_s[lo:hi] = time.time()

    def stop(self) -> None:
        """Stop producing (a no-op when the thread never started: the backlog phase produces inline)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def run_to_end(self) -> KeyedProducer:
        """Produce everything on the calling thread (the backlog phase); raises what stopped it."""
        self._produce()
        return self


@dataclass
class Routers:
    """Router worker processes of one run (started in ``procs``, stopped by :meth:`stop`)."""

    spec: RunSpec
    procs: Processes
    count: int
    ports: list[int] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    cpu0: float = 0.0

    def start(self, timeout_s: float = 120.0) -> Routers:
        """Start the workers and wait until they own every raw partition; CPU is counted from then on."""
        from connectors.broker import free_port

        self.ports = [free_port() for _ in range(self.count)]
        for i, port in enumerate(self.ports):
            env = {"SKEWROUTE_ROUTER__INSTANCE_ID": f"{self.spec.tag}-router-{i + 1}"}
            log = self.spec.folder / f"router-{i + 1}.log"
            self.children.append(self.procs.start(f"router-{i + 1}", router_command(self.spec.config_file, port),
                                                  log, env))  # fmt: skip
        self.wait(lambda v: sum(x["assigned"] for x in v) >= self.spec.n and all(x["assigned"] for x in v),
                  timeout_s, "owning the raw partitions")  # fmt: skip
        self.cpu0 = self.cpu_seconds()
        return self

    def views(self) -> list[dict[str, float]]:
        """Per worker: assigned partitions, records routed, dead letters (zeros when unreachable)."""
        from router.commands.worker import scrape

        out = []
        for port in self.ports:
            view = {"assigned": 0.0, "routed": 0.0}
            try:
                for rv in scrape(f"http://127.0.0.1:{port}/metrics", timeout=1.0).values():
                    view["assigned"] += rv.values.get("skewroute_assigned_partitions", 0.0)
                    view["routed"] += rv.values.get("skewroute_tuples_out_total", 0.0)
            except OSError:
                pass
            out.append(view)
        return out

    def wait(self, done: object, timeout_s: float, what: str) -> None:
        """Poll the workers until ``done(views)``; raise if a worker died or time ran out."""
        deadline = time.monotonic() + timeout_s
        while True:
            dead = next((c for c in self.children if not c.running), None)
            if dead is not None:
                raise SkewrouteError(f"{dead.name} of {self.spec.tag} exited: {dead.log_tail()}")
            if done(self.views()):  # type: ignore[operator]
                return
            if time.monotonic() > deadline:
                raise SkewrouteError(f"{self.spec.tag}: router workers timed out {what}")
            time.sleep(0.25)

    def routed(self) -> int:
        """Records the workers routed (acknowledged by Kafka)."""
        return int(sum(v["routed"] for v in self.views()))

    def cpu_seconds(self) -> float:
        """CPU seconds of every worker process so far."""
        return sum(tree_cpu_seconds(c.proc.pid) for c in self.children)

    def stop(self) -> None:
        """Stop the workers (SIGTERM: deliver, commit, leave the group)."""
        self.procs.stop_many(self.children)
