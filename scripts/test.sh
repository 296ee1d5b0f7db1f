#!/usr/bin/env bash
# Runs the tests: unit tests (no Kafka, no Spark) and integration tests against a real
# Apache Kafka (KAFKA_EOS_BOOTSTRAP if set, else Docker if present, else the embedded KRaft
# brokers) and a real local Spark. Installs what it needs first.
#
#   scripts/test.sh                        the gate (what CI runs): lint (ruff, mypy), the
#                                          tests not marked `full` on the newest pyspark,
#                                          and beside it, in a second lane, on each older
#                                          pyspark line (each in its own venv) the unit
#                                          tests and the tests marked `matrix` (on 4.0
#                                          also `oldest`)
#   scripts/test.sh --full                 the full profile: the same with the tests marked
#                                          `full` too
#   scripts/test.sh tests -k offsets       only these pytest arguments, newest pyspark
#   scripts/test.sh --pyspark 4.0.5 tests  the same on one older line
#   KAFKA_EOS_LATEST=1 scripts/test.sh ... with the newest releases of every dependency
#                                          (scripts/setup.sh --latest) instead of the
#                                          versions CI tested (constraints/ci.txt)
#
# Every pytest run writes $RESULTS/junit-<run>.xml and lists its 25 slowest tests; the
# gate and the full profile end with per-module time tables (scripts/times.py, also in
# $RESULTS/times.md).
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# No column tables in code objects, so a traceback formatted from inside a garbage
# collection never calls ast.parse: on Python 3.11 a nested ast.parse (an object's
# __del__ raising while pytest parses a source for a report, pytest's unraisable hook
# then formatting that traceback) ends the session with "SystemError: AST constructor
# recursion depth mismatch" (CPython gh-106905, pytest-dev/pytest#10763). It ended a CI
# run with every test passed. Tracebacks lose only their ^^^ markers.
export PYTHONNODEBUGRANGES=1

# The newest patch of each older minor line the package claims (pyproject: pyspark>=4.0).
OLDER_LINES=(4.0.5 4.1.4 4.2.1)
# The broker of one older line's tests: the gate's Kafka 3.x cell (transaction protocol
# v1) is the 4.1 line's crash test, on an embedded Kafka 3.9 (integration/conftest.py), and
# the newest broker's (4.4) is the 4.2 line's; integration/test_kafka_lines.py runs more of
# the suites on 3.9 and 4.4, in the full profile.
declare -A BROKER_OF_LINE=([4.1]=3.9 [4.2]=4.4)  # by minor line: a patch bump keeps the cell
RESULTS=${KAFKA_EOS_RESULTS_DIR:-.kafka-eos/results}
mkdir -p "$RESULTS"
setup=(scripts/setup.sh)
if [ "${KAFKA_EOS_LATEST:-}" = 1 ]; then
  setup+=(--latest)
fi

# What each line runs is chosen by pytest markers (pyproject.toml, docs/dev/testing.md): the
# newest line every test not marked `full`; every older line the unit tests and the tests
# marked `matrix`; the oldest line, 4.0, which differs most from the newest (its sink gets
# rows, not Arrow; its source gets no read limits), also those marked `oldest`.
# The newest line's tests marked `storage` (they start HDFS, a Hive metastore or an S3
# store) or `second_lane` (a standalone cluster, secured brokers) run in the second lane,
# after the older lines: that balances the two lanes (measured: 38 minutes against 25
# with only the storage tests there). The main job (marked `oldest_full`) runs on 4.0 in
# the full profile only; the gate runs its paths on 4.0 through the crash and Connect tests.
profile=gate
FIRST_LANE_ALSO=()
NEWEST_RUN=(-m "gate and not (storage or second_lane)")
LANE2_RUN=(-m "gate and (storage or second_lane)")
MATRIX_RUN=(-m "gate and matrix")
OLDEST_RUN=(-m "gate and (matrix or oldest)")
if [ "${1:-}" = "--full" ]; then
  shift
  [ "$#" -eq 0 ] || { echo "test: --full takes no other arguments" >&2; exit 2; }
  profile=full
  NEWEST_RUN=(-m "not (storage or second_lane)")
  # In the full profile the second lane is the longer (the older lines' 18 minutes, then
  # the storage tests' crash matrix and long lives): two of its modules, about 15 minutes,
  # run in the first lane, after its own tests (ca4060a, alone: 97 minutes against about
  # 128; docs/dev/testing.md).
  FIRST_LANE_ALSO=(integration/test_standalone_cluster.py integration/test_kafka_lines.py)
  LANE2_RUN=(-m "storage or second_lane")
  for moved in "${FIRST_LANE_ALSO[@]}"; do
    LANE2_RUN+=("--ignore=$moved")
  done
  MATRIX_RUN=(-m matrix)
  OLDEST_RUN=(-m "matrix or oldest or oldest_full")
fi

# One pytest run in one venv; its summary line goes to $summary, its JUnit XML to $junits.
summary=$(mktemp)
junits=$(mktemp)
trap 'rm -f "$summary" "$junits"' EXIT
run_pytest() {  # run_pytest LABEL VENV ARGS...
  local label=$1 venv=$2; shift 2
  local run_started rc log junit
  run_started=$(date +%s)
  log=$(mktemp)
  junit="$RESULTS/junit-$(printf '%s' "$label" | tr -cs 'A-Za-z0-9.' '-' | sed 's/-$//').xml"
  rm -f "$junit"
  "$venv/bin/python" -m pytest -p no:cacheprovider --junitxml="$junit" --durations=25 "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 5 ]; then
    # pytest's 5 means nothing was collected: for this project that is a broken run.
    echo "test: pytest collected no tests for $label; failing the run" >&2
    rc=1
  fi
  [ -f "$junit" ] && echo "$junit" >> "$junits"
  printf '%-24s %-60s %5ss  exit %s\n' "$label" \
    "$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$log" | tail -1 | sed 's/=//g; s/^ *//; s/ *$//')" \
    "$(( $(date +%s) - run_started ))" "$rc" >> "$summary"
  rm -f "$log"
  return "$rc"
}

if [ "${1:-}" = "--pyspark" ]; then
  version=${2:?"test: --pyspark needs a version, e.g. 4.0.5"}; shift 2
  "${setup[@]}" --pyspark "$version" || exit 1
  run_pytest "pyspark $version" ".venv-pyspark-${version%.*}" "$@"
  rc=$?
  echo "wall time: $(( $(date +%s) - started ))s, set-up included"
  exit "$rc"
fi

if [ "$#" -gt 0 ]; then
  "${setup[@]}" || exit 1
  run_pytest "pyspark (newest)" .venv "$@"
  rc=$?
  echo "wall time: $(( $(date +%s) - started ))s, set-up included"
  exit "$rc"
fi

# The newest line's set-up; its drivers' class archive (kafka_eos_tools/jvm_archive.py,
# about a minute) is built beside the lint and the unit tests, which start no driver,
# instead of before both lanes.
KAFKA_EOS_JVM_ARCHIVE=later "${setup[@]}" || exit 1
.venv/bin/python -m kafka_eos_tools.jvm_archive > "$RESULTS/jvm-archive.log" 2>&1 &
archive_build=$!

# The older lines run in a second lane, beside the newest line's tests: each line's venv
# is built (pip is mostly download and unzip), then its tests run, one line after
# another; then the newest line's storage and second_lane tests. The lane runs at a lower
# priority, so the newest line's timing-sensitive tests keep the CPU they need and the lane
# fills the time those wait on timeouts and restarts (measured: the sequential order took 45
# minutes, 9 of them the older lines; the lane beside it cost the newest line 0.6 min).
# Each pytest session starts its own brokers and Spark on free ports. The newest line's
# set-up above has already fetched the Kafka jars they share.
for version in "${OLDER_LINES[@]}"; do
  rm -f "$RESULTS/setup-pyspark-$version.rc"
done
older_log="$RESULTS/older-lines.log"
(
  renice -n 10 -p "$BASHPID" > /dev/null
  lane_failed=0
  for version in "${OLDER_LINES[@]}"; do
    if ! "${setup[@]}" --pyspark "$version" > "$RESULTS/setup-pyspark-$version.log" 2>&1; then
      echo "test: set-up of pyspark $version failed; the end of $RESULTS/setup-pyspark-$version.log:"
      tail -20 "$RESULTS/setup-pyspark-$version.log"
      echo "pyspark $version         set-up FAILED" >> "$summary"
      lane_failed=1
      continue
    fi
    broker=${BROKER_OF_LINE[${version%.*}]:-}
    if [ "$version" = "${OLDER_LINES[0]}" ]; then
      run_pytest "pyspark $version (oldest)" ".venv-pyspark-${version%.*}" "${OLDEST_RUN[@]}" || lane_failed=1
    else
      KAFKA_EOS_KAFKA_VERSION=$broker run_pytest "pyspark $version (matrix${broker:+, Kafka $broker})" \
        ".venv-pyspark-${version%.*}" "${MATRIX_RUN[@]}" || lane_failed=1
    fi
  done
  run_pytest "pyspark (newest, lane 2)" .venv "${LANE2_RUN[@]}" || lane_failed=1
  exit "$lane_failed"
) > "$older_log" 2>&1 &
older_lane=$!
echo "test: pyspark ${OLDER_LINES[*]} run in a second lane (set-up, then tests; log: $older_log)"

failed=0
echo "== lint: ruff and mypy (scripts/lint.sh) =="
if scripts/lint.sh; then
  echo "lint                     clean" >> "$summary"
else
  echo "lint                     FAILED" >> "$summary"
  failed=1
fi
newest=$(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')
run_pytest "pyspark $newest ($profile)" .venv "${NEWEST_RUN[@]}" || failed=1
if [ "${#FIRST_LANE_ALSO[@]}" -gt 0 ]; then
  run_pytest "pyspark $newest (moved from lane 2)" .venv -m "storage or second_lane" "${FIRST_LANE_ALSO[@]}" \
    || failed=1
fi
wait "$archive_build" || echo "test: the drivers' class archive was not built ($RESULTS/jvm-archive.log)"
echo "== the older pyspark lines (second lane; waiting for it to end) =="
wait "$older_lane" || failed=1
cat "$older_log"
echo
echo "== time per module (scripts/times.py, $RESULTS/times.md) =="
mapfile -t xml_files < "$junits"
[ "${#xml_files[@]}" -eq 0 ] || .venv/bin/python scripts/times.py "${xml_files[@]}" | tee "$RESULTS/times.md"
echo "== pyspark matrix ($profile) =="
cat "$summary"
echo "wall time: $(( $(date +%s) - started ))s, set-up included"
total() { grep -oE "[0-9]+ $1" "$summary" | awk '{n += $1} END {print n + 0}'; }
echo "matrix: $(total passed) passed, $(( $(total failed) + $(total error) )) failed, $(total skipped) skipped"
[ "${#xml_files[@]}" -eq 0 ] || .venv/bin/python scripts/times.py --failures "${xml_files[@]}"
exit "$failed"
