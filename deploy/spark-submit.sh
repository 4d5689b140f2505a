#!/usr/bin/env bash
# Submit skewroute's Spark consumer job to a cluster.
#
#   deploy/spark-submit.sh --master spark://spark-master:7077 --config deploy/configs/several-routes.yaml --route clicks
#   deploy/spark-submit.sh --master yarn --deploy-mode cluster --config skewroute.yaml        # YARN
#   SKEWROUTE_SPARK__SOURCE=kafka deploy/spark-submit.sh --master k8s://https://api:6443 ...  # Spark's Kafka source
#
# Executors get the project's Python the way a cluster ships it: with a non-local master this script packs the
# environment (skewroute + every dependency + its own interpreter and standard library, cached;
# `python -m spark_consumers.envpack`) and passes `--archives <pack>.tar.gz#environment`; executors run
# ./environment/bin/python (spark.sql.execution.pyspark.python). No absolute path of this machine reaches an
# executor, and executor hosts need no Python of their own (same CPU architecture, a C library at least as new).
# The driver (client mode) keeps its own interpreter: it plans the Python data source in Python workers of its
# own. If executors run the image of deploy/Dockerfile instead, set SKEWROUTE_SHIP_ENV=off.
# With source=kafka the job needs spark-sql-kafka: spark.kafka_package, else the job's default (the newest published).
# Secrets: pass SASL passwords through the environment (SKEWROUTE_KAFKA__SASL_PASSWORD via
# spark.yarn.appMasterEnv.* / spark.kubernetes.driverEnv.*), never on the command line.
# Runs from any folder, and the job runs in the caller's folder: a relative --config (or $SKEWROUTE_CONFIG) and the
# relative paths in it (checkpoint_dir, output_path, progress_log) are the caller's, as with `skewroute spark-job`.
set -euo pipefail

MASTER="local[2]"; DEPLOY_MODE="client"; CONFIG="${SKEWROUTE_CONFIG:-}"; ROUTE=""; EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --master) MASTER="$2"; shift 2 ;;
    --deploy-mode) DEPLOY_MODE="$2"; shift 2 ;;
    --config) CONFIG="$2"; shift 2 ;;
    --route) ROUTE="$2"; shift 2 ;;
    *) EXTRA+=("$1"); shift ;;
  esac
done
if [[ -n "$CONFIG" ]]; then
  [[ -f "$CONFIG" ]] || { echo "error: config file $CONFIG does not exist (relative to $PWD)" >&2; exit 2; }
  CONFIG="$(cd "$(dirname "$CONFIG")" && pwd)/$(basename "$CONFIG")"
fi
[[ -n "${PYSPARK_PYTHON:-}" && "$PYSPARK_PYTHON" != /* ]] && PYSPARK_PYTHON="$PWD/$PYSPARK_PYTHON"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"  # the checkout: its .venv, its packages

PY="${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}"
# The Spark of the installed PySpark (its bin/spark-submit), unless SPARK_HOME names another one.
export SPARK_HOME="${SPARK_HOME:-$(cd "$ROOT" && "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')}"
# The Kafka connector the job's settings ask for (spark.source, spark.kafka_package; empty for the Python source):
# the same settings, environment included, and the same default as `skewroute spark-job`. Exit 2 on bad settings.
PACKAGE="$(cd "$ROOT" && "$PY" - "$CONFIG" <<'PY'
import sys
from schemas.exceptions import ConfigError
from schemas.settings import SkewrouteSettings
from spark_consumers.session import session_conf
try:
    spark = SkewrouteSettings.load(sys.argv[1] or None).spark
except ConfigError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
print(session_conf(spark).get("spark.jars.packages", ""))
PY
)" || exit $?
JOB="$(cd "$ROOT" && "$PY" -c 'import spark_consumers.job as j; print(j.__file__)')"

ARGS=(--master "$MASTER" --deploy-mode "$DEPLOY_MODE" --name skewroute-spark
      --conf spark.sql.shuffle.partitions="${SKEWROUTE_SPARK__SHUFFLE_PARTITIONS:-8}")
if [[ "$MASTER" == local* ]]; then
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"  # all on this host
  ARGS+=(--conf spark.pyspark.python="$PY" --conf spark.pyspark.driver.python="$PY")
elif [[ "${SKEWROUTE_SHIP_ENV:-auto}" != "off" ]]; then
  PACK="$(cd "$ROOT" && "$PY" -m spark_consumers.envpack)"
  ARGS+=(--archives "$PACK#environment" --conf spark.sql.execution.pyspark.python=./environment/bin/python)
  if [[ "$DEPLOY_MODE" == "cluster" ]]; then  # the driver runs where the archive is unpacked too
    ARGS+=(--conf spark.pyspark.python=./environment/bin/python --conf spark.pyspark.driver.python=./environment/bin/python)
  else
    ARGS+=(--conf spark.pyspark.python="$PY" --conf spark.pyspark.driver.python="$PY")
  fi
fi
if [[ "$DEPLOY_MODE" == "client" ]]; then  # the driver logs warnings and errors, not Spark's every INFO line
  ARGS+=(--driver-java-options "-Dlog4j2.configurationFile=file://$ROOT/spark_consumers/log4j2.properties")
fi
if [[ -n "$PACKAGE" ]]; then
  ARGS+=(--packages "$PACKAGE")
fi
if [[ "${SKEWROUTE_PY_FILES:-0}" == "1" ]]; then
  ZIP="$(mktemp -d)/skewroute.zip"
  (cd "$ROOT" && zip -qr "$ZIP" connectors schemas spark_consumers router -x '*__pycache__*')
  ARGS+=(--py-files "$ZIP")
fi
if [[ -n "$CONFIG" ]]; then
  ARGS+=(--files "$CONFIG")
  [[ "$DEPLOY_MODE" == "cluster" ]] && CONFIG="$(basename "$CONFIG")"
fi

JOB_ARGS=()
[[ -n "$CONFIG" ]] && JOB_ARGS+=(--config "$CONFIG")
[[ -n "$ROUTE" ]] && JOB_ARGS+=(--route "$ROUTE")
set -x
exec "${SPARK_SUBMIT:-$SPARK_HOME/bin/spark-submit}" "${ARGS[@]}" "$JOB" "${JOB_ARGS[@]}" "${EXTRA[@]}"
