"""The project's Python environment packed for Spark executors (``spark.archives``), built once and cached.

How a cluster user ships Python code to executors that do not share the submitter's disk: a relocatable
environment archive is listed in ``spark.archives`` as ``<archive>#environment``; every executor
unpacks it into its working folder and runs ``./environment/bin/python``. No absolute path of the submitting
machine reaches an executor. The archive holds skewroute itself (installed from a copy of the source tree,
not editable) and every dependency, except PySpark's jars (executors run their own Spark; Python workers never
read them), which halves the archive.

The archive carries its own interpreter, so executor hosts need no Python of their own (only a compatible C
library, the same CPU architecture and the system libraries Python's extension modules link to: OpenSSL, zlib,
libffi): ``bin/python3.X`` is a copy of the base interpreter the build venv was made from, with its shared
``libpython`` (when it has one) in ``lib/`` and its standard library in ``lib/python3.X`` beside the venv's
``site-packages``; ``bin/python`` is a small shell script that points ``PYTHONHOME`` and the library path at the
folder it was unpacked into. No symlink and no setting in the archive names a path of the building machine
(a venv's ``bin/python`` is a link to the base interpreter's absolute path and its ``pyvenv.cfg`` names that
folder: neither is packed).

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
import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from schemas.exceptions import SkewrouteError

__all__ = [
    "PackError", "PackedEnv", "default_cache", "executor_python_conf", "fingerprint", "pack_portable", "packed_env",
    "project_root",
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
#: Not packed from the venv's site-packages: PySpark's jars (executors run their own Spark) and bytecode.
_SKIP_SITE = ("pyspark/jars",)
#: Not packed from the base interpreter's standard library (top-level names): its own installed packages,
#: tests, GUI and build files.
_SKIP_STDLIB = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip")

#: ``bin/python`` of the archive: the copied interpreter with its home and libraries where the archive was unpacked.
_LAUNCHER = """#!/bin/sh
# skewroute's packed environment: run its own interpreter, with the standard library and libpython beside it.
here="$(cd "$(dirname "$0")/.." && pwd -P)"
export PYTHONHOME="$here"
export LD_LIBRARY_PATH="$here/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
exec "$here/bin/{python}" "$@"
"""
#: ``sitecustomize.py`` of the archive: its site-packages with their ``.pth`` files on every interpreter's path
#: (distributions such as Debian's look for dist-packages under a prefix, not site-packages).
_SITECUSTOMIZE = """import os, site, sys
site.addsitedir(os.path.join(sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages"))
"""


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
            pack_portable(venv, part, compress_level=compress_level)
        except OSError as exc:
            raise PackError(f"packing {venv} failed: {exc}") from exc
        part.chmod(0o644)
        part.replace(archive)
        for old in cache.glob("skewroute-env-*.tar.gz"):
            if old != archive:
                old.unlink(missing_ok=True)
        return PackedEnv(archive, True, time.monotonic() - t0, archive.stat().st_size)


def _add_tree(tar: tarfile.TarFile, src: Path, arc: str, skip: Callable[[Path], bool]) -> None:
    """Add ``src`` as ``arc``: files and relative symlinks inside ``src``; absolute or escaping links as copies."""
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if "__pycache__" in rel.parts or skip(rel):
            continue
        name = f"{arc}/{rel.as_posix()}"
        if path.is_symlink():
            target = os.readlink(path)
            inside = not os.path.isabs(target) and (path.parent / target).resolve().is_relative_to(src.resolve())
            if inside:
                tar.add(path, name, recursive=False)
                continue
            if path.is_dir():
                continue  # a link to a folder elsewhere (e.g. a venv's lib64): not needed
        if path.is_file():
            tar.add(path.resolve(), name, recursive=False)
        elif path.is_dir():
            tar.add(path, name, recursive=False)


def _add_text(tar: tarfile.TarFile, name: str, text: str, mode: int = 0o644) -> None:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, int(time.time())
    tar.addfile(info, io.BytesIO(data))


def pack_portable(venv: Path, output: Path, *, compress_level: int = 1) -> None:
    """Write ``venv`` as a self-contained environment archive (tar.gz) that runs wherever it is unpacked.

    The base interpreter of ``venv`` (read from its ``bin/python``), its shared ``libpython`` and its standard
    library go in beside the venv's ``site-packages``; ``bin/python`` is the launcher (see the module docstring).
    """
    py = venv / "bin" / "python"
    probe = (
        "import sys, sysconfig as c; print(sys._base_executable); print(sys.base_prefix); "
        "print(c.get_paths()['stdlib']); print(c.get_config_var('LIBDIR') or ''); "
        "print(c.get_config_var('INSTSONAME') if c.get_config_var('Py_ENABLE_SHARED') else '')"
    )
    res = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True)
    base_exe, _prefix, stdlib, libdir, soname = res.stdout.splitlines()
    minor = f"python{Path(stdlib).name.removeprefix('python')}"
    site = next((venv / "lib").glob("python3*/site-packages"))
    with tarfile.open(output, "w:gz", compresslevel=compress_level) as tar:
        tar.add(os.path.realpath(base_exe), f"bin/{minor}", recursive=False)
        _add_text(tar, "bin/python", _LAUNCHER.format(python=minor), 0o755)
        _add_text(tar, "bin/python3", _LAUNCHER.format(python=minor), 0o755)
        if soname and (Path(libdir) / soname).exists():
            tar.add(os.path.realpath(Path(libdir) / soname), f"lib/{soname}", recursive=False)
        _add_tree(tar, Path(stdlib), f"lib/{minor}",
                  lambda rel: rel.parts[0] in _SKIP_STDLIB or rel.parts[0].startswith("config-")
                  or rel.name in ("sitecustomize.py", "usercustomize.py"))  # fmt: skip
        _add_text(tar, f"lib/{minor}/sitecustomize.py", _SITECUSTOMIZE)
        _add_tree(tar, site, f"lib/{minor}/site-packages",
                  lambda rel: any(rel.as_posix().startswith(p) for p in _SKIP_SITE))  # fmt: skip


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
