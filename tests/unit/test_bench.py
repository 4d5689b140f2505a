"""Benchmark runner, report, advisor, suite helpers and the CLI, checked against direct computations."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mmh3
import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.bench import BenchSpec, run_bench
from benchmarks.bench.experiments import adaptation_lag, cumulative_imbalance, split_keys
from benchmarks.bench.report import write_report
from benchmarks.bench.suite import EXPERIMENTS, run_suite
from benchmarks.commands.bench import BatchesOpt, parse_batches
from benchmarks.workloads import make_workload
from router.choose.advisor import advise, holistic_rule
from router.choose.measure import BATCH_SIZES
from router.cli import app
from router.partitioners import PartitionerState, registry
from router.partitioners.simple import HashPartitioner


def direct_metrics(keys: np.ndarray, combiners: np.ndarray, n: int, m: int, c: float, w: int) -> dict[str, list[float]]:
    """The docs/partitioners.md definitions, computed naively per window of ``w`` tuples."""
    out: dict[str, list[float]] = defaultdict(list)
    for s in range(0, len(keys), w):
        ks, cs = keys[s : s + w].tolist(), combiners[s : s + w].tolist()
        loads = np.bincount(cs, minlength=n)
        pairs = set(zip(ks, cs, strict=True))
        red = np.zeros(m, dtype=np.int64)
        for k, _ in pairs:
            red[mmh3.hash(str(k).encode(), 42, signed=False) % m] += 1
        out["max_load"].append(float(loads.max()))
        out["ratio"].append(loads.max() / loads.mean())
        out["imbalance"].append(loads.max() - loads.mean())
        out["replication"].append(len(pairs) / len(set(ks)))
        out["reducer_max"].append(float(red.max()))
        out["time"].append(loads.max() + c * red.max())
    return out


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    wl = make_workload("zipf:s=1.2,keys=500,tuples=4000,batch=300")
    spec = BenchSpec(
        partitioners=("hash", "shuffle", "pkg", "nope", "pkg:bogus=1"),
        n=4,
        m=3,
        routers=2,
        c=2.0,
        window=12_000,
        slide=1_000,
    )
    result = run_bench(wl, spec)
    out = tmp_path_factory.mktemp("bench")
    write_report(result, out)
    return result, out


def test_report_numbers_equal_direct_metrics(small_run: tuple[Any, Path]) -> None:
    result, out = small_run
    keys = np.concatenate([k for k, _ in make_workload("zipf:s=1.2,keys=500,tuples=4000").batches()])
    data = json.loads((out / "result.json").read_text())
    md = (out / "report.md").read_text()
    assert data["tuples"] == 4000 and data["config"]["routers"] == 2
    for label in ("hash", "shuffle", "pkg"):
        run = result.run(label)
        assert run.ok and run.assignment is not None and run.assignment.shape == (4000,)
        direct = direct_metrics(keys, run.assignment, 4, 3, 2.0, 1000)
        js = data["runs"][label]
        for attr, series in direct.items():
            assert js["windows"][attr] == pytest.approx(series), (label, attr)
            assert js["summary"][f"{attr}_mean"] == pytest.approx(np.mean(series))
            assert js["summary"][f"{attr}_p95"] == pytest.approx(np.percentile(series, 95))
        row = next(line for line in md.splitlines() if line.startswith(f"| {label} |"))
        assert f"{np.mean(direct['ratio']):.3f}" in row and f"{np.mean(direct['time']):.1f}" in row
        assert js["summary"]["tuples_per_s"] > 0
    assert (out / "load.png").stat().st_size > 1000 and (out / "replication.png").stat().st_size > 1000


def test_combined_assignment_is_the_routers_output(small_run: tuple[Any, Path]) -> None:
    result, _ = small_run
    keys = np.concatenate([k for k, _ in make_workload("zipf:s=1.2,keys=500,tuples=4000").batches()])
    want = np.array([mmh3.hash(str(k).encode(), 13, signed=False) % 4 for k in keys.tolist()])
    assert np.array_equal(result.run("hash").assignment, want)
    shuffle = result.run("shuffle").assignment
    for r in (0, 1):  # each router round-robins over its own sub-stream (every other tuple)
        sub = shuffle[r::2].astype(np.int64)
        assert np.all((sub[1:] - sub[:-1]) % 4 == 1)


def test_failures_are_reported_not_raised(small_run: tuple[Any, Path]) -> None:
    result, out = small_run
    assert "UnknownPartitionerError" in (result.run("nope").error or "")
    assert "bogus" in (result.run("pkg:bogus=1").error or "")
    md = (out / "report.md").read_text()
    assert "| nope | n/a |" in md
    assert json.loads((out / "result.json").read_text())["runs"]["nope"]["error"]


class RecordingHash(HashPartitioner):
    """Hash routing that records every merge() call."""

    name = "recording-hash"
    merges: list[tuple[int, int]] = []

    def merge(self, peers: Sequence[PartitionerState]) -> None:
        RecordingHash.merges.append((self.tuples_seen, len(peers)))


def test_in_process_sync_every_dsync_tuples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "recording-hash", RecordingHash)  # removed again after the test
    RecordingHash.merges.clear()
    wl = make_workload("uniform:keys=100,tuples=10000,batch=500")
    run_bench(wl, BenchSpec(partitioners=("recording-hash",), routers=3, dsync=2000, batches=None))
    assert len(RecordingHash.merges) == 3 * 6  # 3 routers, before the first tuple, at 2000, 4000, ..., 10000
    assert {p for _, p in RecordingHash.merges} == {2}
    assert sorted({t for t, _ in RecordingHash.merges}) == [0, 666, 667, 1333, 1334, 2000, 2666, 2667, 3333, 3334]


def test_advisor_few_keys_picks_shuffle_because_of_load() -> None:
    wl = make_workload("uniform:keys=4,tuples=8000")
    adv = advise(wl, BenchSpec(partitioners=("shuffle", "hash", "pkg", "cam", "am"), window=1000, slide=1000))
    assert adv.best.label == "shuffle"
    best, cam = adv.best.summary, adv.result.run("cam").summary
    assert best["max_load_mean"] < cam["max_load_mean"] - 50  # perfect balance beats 4 keys on 8 combiners
    assert best["reducer_max_mean"] > cam["reducer_max_mean"]  # though it pays more partials
    assert adv.rule.choice == ("shuffle",) and adv.rule_run is not None and adv.rule_run.label == "shuffle"
    assert "load balance" in adv.reason or "tie" in adv.reason


def test_advisor_many_keys_picks_affinity_because_of_aggregation() -> None:
    wl = make_workload("uniform:keys=500,tuples=8000")
    adv = advise(wl, BenchSpec(partitioners=("shuffle", "hash", "pkg", "cam", "am"), window=1000, slide=1000))
    assert adv.best.label in ("am", "cam")
    best, sh = adv.best.summary, adv.result.run("shuffle").summary
    assert best["replication_mean"] == pytest.approx(1.0)
    assert sh["reducer_max_mean"] - best["reducer_max_mean"] > sh["max_load_mean"] - best["max_load_mean"] > -50
    assert sh["time_mean"] > best["time_mean"]
    assert adv.rule.choice == ("am", "cam") and holistic_rule(adv.result).groups > 300


def test_suite_helpers() -> None:
    # cumulative loads 1,0 then 2,0 (n=2, checkpoints every tuple): I = 0.5 then 1.0, mean 0.75, / N=2
    assert cumulative_imbalance([0, 0], 2, every=1) == pytest.approx(0.375)
    assert adaptation_lag([3, 3, 3, 2.0, 1.6, 1.5, 1.5, 1.5, 1.5, 1.5], 2, 10) == 2
    codes = np.array([0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 1, 2])
    comb = np.array([0, 1, 0, 1, 2, 3, 0, 0, 0, 0, 2, 3])
    win = np.repeat([0, 1], 6)
    per, share = split_keys(codes, comb, win, 4)
    assert per == 0.5 and share == 1.0  # key 0 is split in window 0 only, and it is hot there
    with pytest.raises(ValueError, match="unknown experiment"):
        run_suite(1000, only=["bogus"])


def test_cli_bench_advise_and_papers_suite(tmp_path: Path) -> None:
    cli = CliRunner()
    res = cli.invoke(app, ["bench", "-w", "zipf:s=1.5,keys=1000", "--records", "3000", "-p", "hash,shuffle,pkg:d=3",
                           "-n", "4", "--out", str(tmp_path / "b")])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "b" / "result.json").read_text())
    assert set(data["runs"]) == {"hash", "shuffle", "pkg:d=3"} and data["runs"]["pkg:d=3"]["params"] == {"d": 3}
    res = cli.invoke(app, ["advise", "-w", "uniform:keys=4", "--records", "4000", "-p", "shuffle,hash"])
    assert res.exit_code == 0, res.output
    assert "recommendation: shuffle" in res.output and "Holistic rule" in res.output
    res = cli.invoke(
        app, ["bench", "--suite", "papers", "--records", "5000", "--only", "holistic", "-o", str(tmp_path / "p")]
    )
    assert res.exit_code == 0, res.output
    md = (tmp_path / "p" / "reproduction.md").read_text()
    assert md.count("| holistic |") == 3
    res = cli.invoke(app, ["bench", "--suite", "papers", "--records", "4000", "--out", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "s" / "reproduction.json").read_text())
    assert set(EXPERIMENTS) <= {r["experiment"] for r in rows}
    assert all(r["verdict"] in ("yes", "no", "n/a") for r in rows)
    res = cli.invoke(app, ["bench", "-w", "nope"])
    assert res.exit_code == 2 and "unknown workload" in res.output


def test_cli_bench_takes_the_router_batch_sizes(tmp_path: Path) -> None:
    """``--batches LO,HI`` reaches the run and its report; the default is the measurements' sizes."""
    assert parse_batches(BatchesOpt.default) == BATCH_SIZES and parse_batches("workload") is None
    cli = CliRunner()
    args = ["-w", "zipf:s=0.6,keys=1000", "--records", "6000", "-p", "dalton", "-n", "4", "--routers", "2"]
    res = cli.invoke(app, ["bench", *args, "--slide", "2000", "--batches", "20,1000", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "result.json").read_text())["config"]
    assert config["batches"] == [20, 1000] and config["sync"] == "merge" and config["routers"] == 2
    assert "router batches 20-999 tuples" in (tmp_path / "report.md").read_text()
    for bad in ("5", "10,10", "a,b"):
        res = cli.invoke(app, ["bench", "--records", "1000", "--batches", bad])
        assert res.exit_code == 2 and "--batches" in res.output and bad in res.output, res.output


class KeySetHash(HashPartitioner):
    """Hash routing that records which keys each router instance (by seed) saw."""

    name = "keyset-hash"
    seen: dict[int, set[int]] = {}

    def _assign(self, batch: Any, times: np.ndarray) -> np.ndarray:
        KeySetHash.seen.setdefault(self.seed, set()).update(int(k) for k in batch.ids.tolist())
        return super()._assign(batch, times)


def test_multi_source_routers_read_their_own_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "keyset-hash", KeySetHash)
    KeySetHash.seen.clear()
    wl = make_workload("multi:kinds=uniform+uniform,keys=50,shared=0,tuples=4000")
    run_bench(wl, BenchSpec(partitioners=("keyset-hash",), routers=4, seed=0))
    assert sorted(KeySetHash.seen) == [0, 1, 2, 3]
    ids = {
        s: {mmh3.hash64(str(k).encode(), 0x5EED, signed=False)[0] for k in r}
        for s, r in ((0, range(50)), (1, range(50, 100)))
    }
    for router, keys in KeySetHash.seen.items():
        assert keys <= ids[router % 2] and len(keys) == 50  # routers 0, 2 read source 0; 1, 3 source 1


def test_partitioned_raw_keys_give_each_key_one_router(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "keyset-hash", KeySetHash)
    KeySetHash.seen.clear()
    wl = make_workload("zipf:s=1.2,keys=300,tuples=6000")
    run_bench(wl, BenchSpec(partitioners=("keyset-hash",), routers=3, seed=0, raw_keys="partitioned"))
    sets = [KeySetHash.seen[r] for r in range(3)]
    assert all(sets) and not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])
    assert sum(len(s) for s in sets) == len({int(k) for r in sets for k in r})
    KeySetHash.seen.clear()
    run_bench(wl, BenchSpec(partitioners=("keyset-hash",), routers=3, seed=0))  # shared: round-robin per tuple
    assert len(KeySetHash.seen[0] & KeySetHash.seen[1]) > 50


def test_key_owner_is_a_function_of_the_key() -> None:
    from router.choose.runner import key_owner

    keys = np.array(["a", "b", "c", "a", "d", "b"] * 50)
    owner = key_owner(keys, 4)
    for k in set(keys.tolist()):
        assert len(set(owner[keys == k].tolist())) == 1
    assert np.array_equal(owner[:6], key_owner(keys[:6], 4))  # the same in any batch
    assert (key_owner(np.arange(1000), 4) == 3).any() and not key_owner(np.arange(10), 1).any()


def test_an_unknown_raw_keys_names_the_field() -> None:
    with pytest.raises(ValueError, match="raw_keys"):
        run_bench(make_workload("uniform:keys=10,tuples=100"), BenchSpec(partitioners=("hash",), raw_keys="keyed"))


def test_dalton_routers_of_a_bench_know_their_peers_from_the_first_tuple() -> None:
    # As a deployment sets partitioner.routers: through the protocol, the first micro-batch is placed by the rule
    # the routers share (without it, each router placed alone until its first SYNC: 1.33 partials per key here)
    wl = make_workload("zipf:s=1.5,keys=10000,tuples=40000,perm=1,seed=42")
    reps = {}
    for sync in ("merge", "protocol"):
        spec = BenchSpec(partitioners=("dalton",), n=8, routers=4, sync=sync, dsync=10_000, slide=20_000,
                         window=240_000, metric_window=20_000)  # fmt: skip
        reps[sync] = run_bench(wl, spec).run("dalton").windows.replication
    assert reps["protocol"][0] <= reps["merge"][0] + 0.02, reps
    assert reps["protocol"][0] < 1.1
