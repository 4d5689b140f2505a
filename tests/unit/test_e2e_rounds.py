"""e2e-bench rounds: the order alternates, and each drain is paired with direct's of the same round."""

from __future__ import annotations

from typing import Any

from benchmarks.e2e import rounds
from benchmarks.e2e.goals import goals, verdict


def _drain(config: str, rate: float, exact: bool = True, n: int = 2) -> dict[str, Any]:
    return {"config": config, "n": n, "phase": "backlog", "spark": {"steady_rate": rate, "shuffled_partials": 10},
            "spark_cpu_us_per_record": 40.0, "total_cpu_us_per_record": 45.0, "router_cpu_s_per_million": 5.0,
            "router_cpu": {"us_per_record": None if config == "direct" else 5.0},
            "exactness": {"exact": exact}}  # fmt: skip


def test_the_order_is_reversed_every_other_round_and_each_drain_is_measured_once() -> None:
    assert rounds.order(["direct", "hash", "dalton"], 1) == ["direct", "hash", "dalton"]
    assert rounds.order(["direct", "hash", "dalton"], 2) == ["dalton", "hash", "direct"]
    assert rounds.order(["direct", "hash", "dalton"], 3) == ["direct", "hash", "dalton"]
    seen: list[tuple[str, int]] = []

    def measure(config: str, r: int) -> dict[str, Any]:
        seen.append((config, r))
        return _drain(config, 1000.0 * r)

    got = rounds.run_rounds(measure, ["direct", "hash"], 4, 2)
    assert seen == [("hash", 2), ("direct", 2), ("direct", 3), ("hash", 3), ("hash", 4), ("direct", 4)]
    assert [(s["config"], s["round"], s["steady_rate"], s["exact"]) for s in got][:2] == [
        ("hash", 2, 2000.0, True), ("direct", 2, 2000.0, True)]  # fmt: skip
    assert rounds.run_rounds(measure, ["direct"], 1, 2) == []


def _doc(hash_rates: list[float], direct_rates: list[float], exact: list[bool] | None = None) -> dict[str, Any]:
    """A run of len(hash_rates) rounds at n = 2: round 1 in ``runs``, the others in ``rounds``."""
    exact = exact or [True] * len(hash_rates)
    runs = [_drain("direct", direct_rates[0]), _drain("hash", hash_rates[0], exact[0])]
    more = [rounds.summary(_drain(c, rate, ok), r + 1)
            for r in range(1, len(hash_rates))
            for c, rate, ok in (("hash", hash_rates[r], exact[r]), ("direct", direct_rates[r], True))]  # fmt: skip
    return {"options": {"rounds": len(hash_rates), "slots": 2, "profile": "light", "workload": "zipf"},
            "runs": runs, "rounds": more}  # fmt: skip


def test_each_ratio_divides_by_direct_of_the_same_round() -> None:
    """The session speeds up: direct 800 -> 1,200; hash is 1.1x direct in every round though it never beats 1,200
    when measured before direct's fast passes."""
    doc = _doc([880, 1100, 1210, 1320], [800, 1000, 1100, 1200])
    p = rounds.paired(doc, 2)["hash"]
    assert [round(x, 2) for x in p["ratios"]] == [1.1, 1.1, 1.1, 1.1] and p["rounds"] == [1, 2, 3, 4]
    assert round(p["median"], 2) == 1.1 and round(p["low"], 2) == 1.1
    g = {x["goal"]: x for x in rounds.goals(doc)}["n=2: hash drain / direct drain, median of the rounds (local[2])"]
    assert g["met"] is True and "every round >= 1" in g["note"] and "over 4 rounds" in g["note"]


def _drain_goal(doc: dict[str, Any]) -> dict[str, Any]:
    return {g["goal"]: g for g in rounds.goals(doc)}["n=2: hash drain / direct drain, median of the rounds (local[2])"]


def test_the_router_cpu_is_set_against_the_spark_cpu_it_saves_in_the_same_round() -> None:
    """Direct's Spark CPU 40 us/rec; hash's 33, 36, 30 (saves 7, 4, 10: median 7) with routers at 5 us/rec."""
    doc = _doc([1000, 1000, 1000], [1000, 1000, 1000])
    cpu = iter([33.0, 36.0, 30.0])
    doc["runs"][1]["spark_cpu_us_per_record"] = next(cpu)
    for s in doc["rounds"]:
        if s["config"] == "hash":
            s["spark_cpu_us_per_record"] = next(cpu)
    p = rounds.paired(doc, 2)["hash"]
    assert p["saved"] == [7.0, 4.0, 10.0] and p["saved_median"] == 7.0 and p["router_median"] == 5.0
    g = {x["goal"]: x for x in rounds.goals(doc)}["n=2: hash router CPU / the Spark CPU it saves, per record"]
    assert g["met"] is True and g["value"] == 5.0 / 7.0 and "router 5.0 us/rec against 7.0 us/rec" in g["note"]
    assert "Spark CPU saved per record (direct's minus its own, same round): median 7.0 us" in "\n".join(
        rounds.lines(doc, 2)
    )
    for s in doc["rounds"]:  # routing costs Spark CPU instead of saving it
        s["spark_cpu_us_per_record"] = 45.0
    doc["runs"][1]["spark_cpu_us_per_record"] = 45.0
    g = {x["goal"]: x for x in rounds.goals(doc)}["n=2: hash router CPU / the Spark CPU it saves, per record"]
    assert g["met"] is False and g["value"] is None


def test_a_round_that_is_not_exact_gives_no_ratio_and_the_median_decides() -> None:
    doc = _doc([900, 1100, 500, 1050], [1000, 1000, 1000, 1000], exact=[True, True, False, True])
    p = rounds.paired(doc, 2)["hash"]
    assert p["rounds"] == [1, 2, 4] and round(p["median"], 2) == 1.05
    g = _drain_goal(doc)
    assert g["met"] is True and "range 0.90-1.10x over 3 rounds (rounds differ)" in g["note"]
    low = _drain_goal(_doc([900, 950], [1000, 1000]))
    assert low["met"] is False and "every round < 1" in low["note"]
    text = "\n".join(rounds.lines(doc, 2))
    assert "| 3 | as given | 1,000 | 500 (0.50) \\* |" in text and "| 2 | reversed | 1,000 | 1,100 (1.10) |" in text
    assert "hash / direct, paired per round: median 1.05x, range 0.90-1.10x over 3 rounds." in text


def test_one_round_adds_nothing_and_a_rounds_run_reports_its_table_goal_and_verdict() -> None:
    one = _doc([900], [1000])
    assert rounds.lines(one, 2) == [] and rounds.goals(one) == []
    doc = _doc([900, 1100, 950, 1050], [1000] * 4)
    doc["runs"] = [r | {"config": "dalton"} if r["config"] == "hash" else r for r in doc["runs"]]
    doc["rounds"] = [s | {"config": "dalton"} if s["config"] == "hash" else s for s in doc["rounds"]]
    text = "\n".join(verdict(doc))
    assert "Dalton drains 1.00x direct (median of 4 rounds, 0.90-1.10x) -- routing is not settled" in text
    names = [g["goal"] for g in goals(doc)]
    assert "n=2: dalton drain / direct drain, median of the rounds (local[2])" in names
