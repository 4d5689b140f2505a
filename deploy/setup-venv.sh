#!/usr/bin/env bash
# Create (or update) the project venv at .venv and install skewroute, its lab (benchmarks/) and the dev tools at
# the tested versions (constraints.txt). Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.skewroute-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ benchmarks/pyproject.toml -nt "$stamp" ] \
   || [ constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]" -e ./benchmarks
  touch "$stamp"
fi
