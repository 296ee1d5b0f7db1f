#!/usr/bin/env bash
# Creates a virtual environment (Python >= 3.10) with kafka_eos and its test tools, and
# fetches the pinned Apache Kafka jars from Maven Central into the cache
# (~/.cache/kafka-eos). Safe to run again: it only does what is missing.
#
#   scripts/setup.sh                     .venv with the newest pyspark
#   scripts/setup.sh --pyspark 4.0.5     .venv-pyspark-4.0 with that pyspark (test matrix)
#   scripts/setup.sh --latest [...]      the newest releases of every dependency, upgraded
#                                        on every call, instead of constraints/ci.txt
#
# By default pip installs exactly the versions of constraints/ci.txt, those CI tested;
# an older pyspark line keeps its own pyspark and py4j.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
pin=""
latest=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --pyspark)
      pin=${2:?"setup: --pyspark needs a version, e.g. 4.0.5"}
      venv=".venv-pyspark-${pin%.*}"
      shift 2 ;;
    --latest) latest=1; shift ;;
    *) echo "setup: unknown argument '$1' (known: --pyspark VERSION, --latest)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY' || { echo "setup: Python >= 3.10 is required (found $("$PYTHON" --version 2>&1))" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY
command -v java >/dev/null || { echo "setup: Java 17 is required for Spark and the embedded Kafka (java not on PATH)" >&2; exit 1; }
command -v mvn >/dev/null || { echo "setup: Maven is required to fetch the Kafka jars (mvn not on PATH)" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
  "$PYTHON" -m venv "$venv"
fi
# The pins, for an older line without the packages whose version follows its pyspark.
constraints=constraints/ci.txt
if [ -n "$pin" ]; then
  constraints="$venv/constraints.txt"
  grep -v -i -E '^(pyspark|pyspark-client|pyspark-connect|py4j)==' constraints/ci.txt > "$constraints"
fi
# What the venv was installed from; a change (or a newer pyproject.toml) installs again.
if [ -n "$latest" ]; then
  installed_from="latest"
else
  installed_from="constraints $(sha256sum "$constraints" | cut -c1-16)"
fi
stamp="$venv/.kafka-eos-installed"
# --no-compile: Python compiles a module when it is first imported (a fraction of pyspark's
# files); compiling every file at install took 14 of 47 s of an older line's venv (measured).
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile)
if [ -n "$latest" ] || [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$installed_from" ]; then
  # The editable install is a .pth line putting the checkout on sys.path (pyproject's
  # package-dir), so Spark's discovery (pkgutil.iter_modules) sees the pyspark_* shims.
  if [ -n "$latest" ]; then
    "${pip[@]}" --upgrade pip
    "${pip[@]}" --upgrade --upgrade-strategy eager -e '.[dev]' ${pin:+"pyspark==$pin"}
  else
    "${pip[@]}" -c "$constraints" --upgrade pip
    "${pip[@]}" -c "$constraints" -e '.[dev]' ${pin:+"pyspark==$pin"} || {
      echo "setup: pip could not install the pinned versions of $constraints (frozen on CPython 3.11," \
           "Linux x86_64); scripts/setup.sh --latest installs the newest releases instead" >&2
      exit 1
    }
  fi
  echo "$installed_from" > "$stamp"
fi
# Fetch (or find cached) the broker jars for both pinned Kafka lines.
"$venv/bin/python" - <<'PY'
from kafka_eos_tools.broker import distribution
for line in sorted(distribution.VERSIONS):
    print("kafka", distribution.VERSIONS[line], "jars:", distribution.kafka_jars(line))
PY
# A class-data archive of Spark's driver JVM for this venv's pyspark (kafka_eos_tools/jvm_archive.py):
# the tests' drivers start faster with it and run as before without it, so a failure is only
# reported. KAFKA_EOS_JVM_ARCHIVE=later: not here (scripts/test.sh builds it beside the lint).
if [ "${KAFKA_EOS_JVM_ARCHIVE:-}" != later ]; then
  "$venv/bin/python" -m kafka_eos_tools.jvm_archive || echo "setup: no JVM class archive; Spark drivers start slower" >&2
fi
