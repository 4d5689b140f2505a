"""The project's Python environment packed for Spark executors (``spark.archives``), built once and cached.

How a cluster user ships Python code to executors that do not share the submitter's disk: a relocatable
virtualenv archive (``venv-pack``) is listed in ``spark.archives`` as ``<archive>#environment``; every executor
unpacks it into its working folder and runs ``./environment/bin/python``. No absolute path of the submitting
machine reaches an executor. The archive holds skewroute itself (installed from a copy of the source tree,
not editable) and every dependency, except PySpark's jars (executors run their own Spark; Python workers never
read them), which halves the archive.

The packed venv links ``bin/python`` to the base interpreter it was made from (``/usr/bin/python3.11`` here):
executor hosts need that Python at that path (the same OS image), as venv-pack documents; when they do not,
ship the image instead (``deploy/Dockerfile``).

Caching: the archive's name carries a fingerprint of the Python version, ``pyproject.toml`` and every source
file of the four packages. An unchanged project reuses it (no work); a changed one reinstalls into the kept
build venv (``<cache>/venv``: only what changed is installed) and packs again. A file lock serialises builds.
The cache is ``default_cache()``: outside the checkout, so a fresh clone on the same machine reuses it.

Driver-side Python (client mode) stays the driver's own interpreter: Spark plans Python data sources in Python
workers started *by the driver*, with ``PYSPARK_PYTHON``, so only the executors' SQL Python workers (data
source reads, ``mapInArrow``) are pointed at the archive, through ``spark.sql.execution.pyspark.python``.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.exceptions import SkewrouteError

__all__ = [
    "PackError", "PackedEnv", "default_cache", "executor_python_conf", "fingerprint", "packed_env", "project_root",
]  # fmt: skip

log = logging.getLogger(__name__)


def default_cache() -> Path:
    """``$SKEWROUTE_PACK_CACHE``, else ``$XDG_CACHE_HOME/skewroute/pack`` (``~/.cache/...``): kept across checkouts."""
    if os.environ.get("SKEWROUTE_PACK_CACHE"):
        return Path(os.environ["SKEWROUTE_PACK_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "skewroute" / "pack"


PACKAGES = ("connectors", "router", "schemas", "spark_consumers")
CONSTRAINTS = "constraints.txt"  # the tested versions of every dependency
ENV_DIR = "environment"  # the archive's fragment: executors unpack it into ./environment
EXECUTOR_PYTHON = f"./{ENV_DIR}/bin/python"
_EXCLUDE = ("lib/python*/site-packages/pyspark/jars/*", "*/__pycache__/*")


class PackError(SkewrouteError):
    """The environment could not be packed."""


@dataclass(frozen=True)
class PackedEnv:
    """A packed environment: the archive, whether this call built it, how long that took, its size."""

    archive: Path
    built: bool
    seconds: float
    size_bytes: int


def project_root() -> Path:
    """The source checkout skewroute runs from (the folder with ``pyproject.toml`` and the packages)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        raise PackError(
            f"packing the environment needs a source checkout (no pyproject.toml beside {root / 'spark_consumers'}); "
            "in an installed image, run executors from the same image instead"
        )
    return root


def _sources(root: Path) -> list[Path]:
    files = [root / "pyproject.toml", root / "README.md", root / CONSTRAINTS]
    for pkg in PACKAGES:
        files += sorted(p for p in (root / pkg).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return [f for f in files if f.is_file()]


def fingerprint(root: Path) -> str:
    """SHA-256 over the Python version and every file the installed package is built from."""
    h = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}.{sys.version_info[2]}\n".encode())
    for f in _sources(root):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise PackError(f"{' '.join(cmd[:4])} ... failed ({res.returncode}): {res.stderr.strip()[-2000:]}")


def _base_python() -> str:
    """The interpreter the project venv was made from (packed venvs must link to a system Python, not a venv)."""
    return str(getattr(sys, "_base_executable", None) or sys.executable)


def _install(venv: Path, root: Path) -> None:
    """Install skewroute (not editable) and its dependencies into ``venv`` from a clean copy of the sources."""
    if not (venv / "bin" / "python").exists():
        _run([_base_python(), "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="skewroute-src-") as tmp:
        src = Path(tmp)
        for f in _sources(root):  # no build/ or egg-info leftovers, no tree pollution
            dest = src / f.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
        pins = ["-c", str(src / CONSTRAINTS)] if (src / CONSTRAINTS).is_file() else []  # the tested versions
        _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins, str(src)])  # dependencies
        _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--force-reinstall",
              str(src)])  # fmt: skip


def packed_env(cache: Path | None = None, root: Path | None = None, *, compress_level: int = 1) -> PackedEnv:
    """The packed environment of the current project (built, or reused when the project did not change)."""
    import venv_pack

    root = root or project_root()
    cache = Path(cache or default_cache()).absolute()
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        key = fingerprint(root)[:16]
        archive = cache / f"skewroute-env-{key}.tar.gz"
        if archive.is_file():
            return PackedEnv(archive, False, 0.0, archive.stat().st_size)
        t0 = time.monotonic()
        log.info("packing the Python environment for executors into %s", archive)
        venv = cache / "venv"
        _install(venv, root)
        part = archive.with_suffix(".part")
        part.unlink(missing_ok=True)
        try:
            venv_pack.pack(
                prefix=str(venv), output=str(part), format="tar.gz", compress_level=compress_level, force=True,
                filters=[("exclude", pat) for pat in _EXCLUDE],
            )  # fmt: skip
        except Exception as exc:  # venv_pack raises its own VenvPackException and OSError
            raise PackError(f"venv-pack failed on {venv}: {exc}") from exc
        part.chmod(0o644)  # venv-pack writes through mkstemp (0600)
        part.replace(archive)
        for old in cache.glob("skewroute-env-*.tar.gz"):
            if old != archive:
                old.unlink(missing_ok=True)
        return PackedEnv(archive, True, time.monotonic() - t0, archive.stat().st_size)


def executor_python_conf(archive: Path) -> dict[str, str]:
    """Spark settings that ship ``archive`` to every executor and run its Python there."""
    return {
        "spark.archives": f"{archive.absolute()}#{ENV_DIR}",
        "spark.sql.execution.pyspark.python": EXECUTOR_PYTHON,
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m spark_consumers.envpack [CACHE]``: build (or reuse) the archive and print its path."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    env = packed_env(Path(args[0]) if args else None)
    what = f"built in {env.seconds:.1f} s" if env.built else "cached"
    print(f"{env.size_bytes / 2**20:.0f} MiB, {what}", file=sys.stderr)
    print(env.archive)


if __name__ == "__main__":
    main()
