"""The packed executor environment: when it is shipped, what reaches executors, when it is rebuilt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.spark_settings import SparkSettings
from spark_consumers import envpack
from spark_consumers.session import executor_env_conf


def test_local_masters_and_explicit_executor_python_ship_nothing(monkeypatch) -> None:
    monkeypatch.setattr(envpack, "packed_env", lambda *a, **k: pytest.fail("must not pack"))
    assert executor_env_conf(SparkSettings(master="local[2]")) == {}
    conf = {"spark.sql.execution.pyspark.python": "/usr/local/bin/python"}  # an image with the project in it
    assert executor_env_conf(SparkSettings(master="spark://h:7077", checkpoint_dir="/shared/ck", conf=conf)) == {}


def test_non_local_master_ships_the_archive_with_a_relative_interpreter(monkeypatch, tmp_path) -> None:
    archive = tmp_path / "skewroute-env-x.tar.gz"
    monkeypatch.setattr(envpack, "packed_env", lambda *a, **k: envpack.PackedEnv(archive, False, 0.0, 1))
    conf = executor_env_conf(SparkSettings(master="spark://h:7077", checkpoint_dir="/shared/ck"))
    assert conf == {
        "spark.archives": f"{archive}#environment",
        "spark.sql.execution.pyspark.python": "./environment/bin/python",
    }
    assert str(Path.cwd()) not in conf["spark.sql.execution.pyspark.python"]


def test_fingerprint_follows_sources_and_pyproject(tmp_path) -> None:
    root = envpack.project_root()
    copy = tmp_path / "src"
    for f in envpack._sources(root):
        dest = copy / f.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest)
    before = envpack.fingerprint(copy)
    assert envpack.fingerprint(copy) == before
    (copy / "spark_consumers" / "job.py").write_text((copy / "spark_consumers" / "job.py").read_text() + "\n# x\n")
    changed = envpack.fingerprint(copy)
    assert changed != before
    (copy / "pyproject.toml").write_text((copy / "pyproject.toml").read_text() + "\n")
    assert envpack.fingerprint(copy) != changed
    (copy / "spark_consumers" / "__pycache__").mkdir(exist_ok=True)
    before = envpack.fingerprint(copy)
    (copy / "spark_consumers" / "__pycache__" / "x.pyc").write_bytes(b"0")  # bytecode is not a source
    assert envpack.fingerprint(copy) == before


def test_cached_archive_is_reused_without_building(tmp_path, monkeypatch) -> None:
    root = envpack.project_root()
    key = envpack.fingerprint(root)[:16]
    (tmp_path / f"skewroute-env-{key}.tar.gz").write_bytes(b"x" * 10)
    monkeypatch.setattr(envpack, "_install", lambda *a: pytest.fail("must not build"))
    env = envpack.packed_env(tmp_path, root)
    assert not env.built and env.size_bytes == 10


def test_spark_cluster_status_without_a_cluster_fails_clearly(tmp_path) -> None:
    from router.cli import app

    res = CliRunner().invoke(app, ["spark-cluster", "status", "--state-dir", str(tmp_path)])
    assert res.exit_code == 1 and "no cluster started" in res.output


def test_packed_environment_runs_where_it_is_unpacked_without_the_build_hosts_python(tmp_path) -> None:
    import subprocess
    import sys
    import tarfile

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "skewroute_probe.py").write_text("VALUE = 42\n")
    (site / "extra.pth").write_text("extra_dir\n")
    (site / "extra_dir").mkdir()
    (site / "extra_dir" / "probe_pth.py").write_text("OK = True\n")
    archive = tmp_path / "env.tar.gz"
    envpack.pack_portable(venv, archive)
    with tarfile.open(archive) as tar:
        links = [m for m in tar.getmembers() if m.issym() or m.islnk()]
        assert not [m.name for m in links if m.linkname.startswith("/")]  # nothing points at this machine
        names = set(tar.getnames())
        assert "pyvenv.cfg" not in names and "bin/python" in names
        executor = tmp_path / "executor" / "work"  # a folder the build never saw
        tar.extractall(executor / "environment", filter="tar")
    probe = "import ssl, json, sqlite3, skewroute_probe, probe_pth, sys; print(sys.prefix, skewroute_probe.VALUE)"
    cmd = ["./environment/bin/python", "-c", probe]
    base = sys.base_prefix
    # Hide the base interpreter the venv links to, as on a host without it (a private mount namespace).
    hidden = subprocess.run(["unshare", "-m", "sh", "-c", f'mount -t tmpfs none "{base}" && exec "$@"', "sh", *cmd],
                            cwd=executor, capture_output=True, text=True)  # fmt: skip
    res = hidden if hidden.returncode == 0 or "Traceback" in hidden.stderr else None
    if res is None:  # no mount namespace here: run it beside the base interpreter, links checked above
        res = subprocess.run(cmd, cwd=executor, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    prefix, value = res.stdout.split()
    assert prefix == str((executor / "environment").resolve()) and value == "42"
    assert not base.startswith(str(tmp_path))
