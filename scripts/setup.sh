#!/usr/bin/env bash
# Creates a virtual environment (Python >= 3.10) with kafka_eos and its test tools, and
# fetches the pinned Apache Kafka jars from Maven Central into the cache
# (~/.cache/kafka-eos). Safe to run again: it only does what is missing.
#
#   scripts/setup.sh                     .venv with the newest pyspark
#   scripts/setup.sh --pyspark 4.0.5     .venv-pyspark-4.0 with that pyspark (test matrix)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
pin=""
if [ "${1:-}" = "--pyspark" ]; then
  pin=${2:?"setup: --pyspark needs a version, e.g. 4.0.5"}
  venv=".venv-pyspark-${pin%.*}"
fi

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY' || { echo "setup: Python >= 3.10 is required (found $("$PYTHON" --version 2>&1))" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
command -v java >/dev/null || { echo "setup: Java 17 is required for Spark and the embedded Kafka (java not on PATH)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "setup: Maven is required to fetch the Kafka jars (mvn not on PATH)" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
stamp="$venv/.kafka-eos-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
  # The editable install is a .pth line putting the checkout on sys.path (pyproject's
  # package-dir), so Spark's discovery (pkgutil.iter_modules) sees the pyspark_* shims.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]' \
    ${pin:+"pyspark==$pin"}
  touch "$stamp"
fi
# Fetch (or find cached) the broker jars for both pinned Kafka lines.
"$venv/bin/python" - <<'PY'
from kafka_eos_tools.broker import distribution
for line in sorted(distribution.VERSIONS):
    print("kafka", distribution.VERSIONS[line], "jars:", distribution.kafka_jars(line))
PY
