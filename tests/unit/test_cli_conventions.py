"""One CLI convention: a flag means the same thing in every command, every option has help, help is plain text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from router.cli import app

#: flag -> the parameter it must name wherever it appears.
MEANING = {
    "--config": "config", "-c": "config",
    "--route": "route",
    "--combiners": "combiners", "-n": "combiners",
    "--reducers": "reducers", "-m": "reducers",
    "--records": "records",
    "--partitioner": "partitioner", "--partitioners": "partitioners",
    "--out": "out", "-o": "out",
    "--workload": "workload", "-w": "workload",
    "--seed": "seed",
    "--cost-factor": "cost_factor",
    "--routers": "routers",
    "--bootstrap": "bootstrap",
}  # fmt: skip
#: Old names of the same things: one name each now.
RETIRED = {"--tuples", "--workers", "--report", "--workdir"}


def commands() -> Iterator[tuple[str, Any]]:
    def walk(prefix: str, cmd: Any) -> Iterator[tuple[str, Any]]:
        if hasattr(cmd, "commands"):  # a group (typer's own classes, not click's, in recent versions)
            for name, sub in cmd.commands.items():
                yield from walk(f"{prefix} {name}".strip(), sub)
        else:
            yield prefix, cmd

    yield from walk("", typer.main.get_command(app))


def test_a_flag_means_the_same_everywhere_and_every_option_has_help() -> None:
    problems = []
    seen = set()
    for name, cmd in commands():
        if "``" in (cmd.help or ""):
            problems.append(f"{name}: raw ``markup`` in the command's help")
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option" or p.name == "help":
                continue
            if not (p.help or "").strip():
                problems.append(f"{name} {p.opts[0]}: no help text")
            if "``" in (p.help or ""):
                problems.append(f"{name} {p.opts[0]}: raw ``markup`` in help")
            for flag in p.opts + p.secondary_opts:
                seen.add(flag)
                if flag in RETIRED:
                    problems.append(f"{name} {flag}: retired flag")
                if flag == "-p" and p.name not in ("partitioner", "partitioners"):
                    problems.append(f"{name} -p names {p.name}, not partitioner(s)")
                elif flag in MEANING and flag != "-p" and p.name != MEANING[flag]:
                    problems.append(f"{name} {flag} names {p.name}, not {MEANING[flag]}")
    assert not problems, "\n".join(problems)
    assert {"--config", "--route", "--combiners", "--records", "--partitioner", "--partitioners", "--out"} <= seen


def test_help_groups_commands_and_has_one_command_per_job() -> None:
    names = {name for name, _ in commands()}
    assert "reproduce" not in names  # = bench --suite papers
    assert {"router", "spark-job", "advise", "init", "router-bench", "bench"} <= names
    out = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    assert out.index("Run") < out.index("router ") < out.index("Choose a partitioner") < out.index("advise")
    assert out.index("init ") < out.index("Lab:") < out.index("bench ")


def test_router_bench_is_a_real_command_with_help() -> None:
    res = CliRunner().invoke(app, ["router-bench", "--help"], terminal_width=200)
    assert res.exit_code == 0
    for flag in ("--records", "--combiners", "--partitioners", "--out", "--rounds", "--mode"):
        assert flag in res.output
    res = CliRunner().invoke(app, ["router-bench", "--mode", "nope"])
    assert res.exit_code == 2 and "--mode" in res.output
