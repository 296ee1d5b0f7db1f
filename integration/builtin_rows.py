"""Spark's built-in Kafka connector in a child process, answering reads and writes as JSON.

One JVM holds one SparkContext, and the built-in connector needs its jars on that
context's class path, so side-by-side tests run the built-in here, in a child process,
and compare with what ``format("kafka_eos")`` does in the test's own session. The child
serves a whole test session (the ``builtin_connector`` fixture, integration/conftest.py):
its JVM starts once, not once per module (measured: 20-45 s each). Rows are normalized by
:data:`NORMALIZE` (binary as base64, timestamp as epoch microseconds, headers as JSON) so
both sides compare as plain values.

    python -m integration.builtin_rows        one request per stdin line, one answer per line
    request = [{"options": {...}}, ...]      # batch reads of format("kafka")
    an entry {"write": [[key, value], ...], "options": {...}} is a batch write instead
    (its result is an empty list; "schema" gives other columns, e.g. a partition);
    with "expect_error": true, an entry that fails gives {"error": message} as its result
    answer = ANSWER + {"connector": version, "results": [...]} or {"failed": traceback}
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from pathlib import Path

NORMALIZE = [
    "base64(key) AS key", "base64(value) AS value", "topic", "partition", "offset",
    "unix_micros(timestamp) AS ts", "timestampType",
    "to_json(transform(headers, h -> named_struct('key', h.key, 'value', base64(h.value)))) AS headers",
]
NORMALIZE_NO_HEADERS = NORMALIZE[:-1]


def normalized(df, headers: bool = True) -> list[tuple]:
    cols = NORMALIZE if headers else NORMALIZE_NO_HEADERS
    rows = df.selectExpr(*cols).orderBy("topic", "partition", "offset").collect()
    return [tuple(r) for r in rows]


# Spark and py4j may print to stdout too: an answer is the line that starts with this.
ANSWER = "builtin-rows-answer "
REPO = Path(__file__).resolve().parents[1]


class BuiltinConnector:
    """The test side: starts the child at the first request, stops it at :meth:`close`."""

    def __init__(self, log: Path) -> None:
        self._log_path = log
        self._proc: subprocess.Popen[str] | None = None

    def run(self, request: list[dict]) -> dict:
        """One request's answer: {"connector": version, "results": [one per entry]}."""
        if self._proc is None:
            self._log = self._log_path.open("w")
            self._proc = subprocess.Popen([sys.executable, "-m", "integration.builtin_rows"], cwd=REPO, text=True,
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith(ANSWER):
                answer = json.loads(line[len(ANSWER):])
                assert "failed" not in answer, answer["failed"]
                return answer
        raise AssertionError(f"the built-in connector's process ended: {self._tail()}")

    def _tail(self) -> str:
        self._log.flush()
        return self._log_path.read_text()[-3000:]

    def close(self) -> None:
        if self._proc is None:
            return
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.close()  # the child's loop ends; it stops its Spark
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc.stdout.close()
        self._log.close()


def main() -> None:
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars
    from kafka_eos_tools.spark_session import spark_builder

    jars, version = builtin_kafka_jars()
    spark = spark_builder("builtin-kafka-rows", jars).getOrCreate()
    try:
        for line in sys.stdin:
            try:
                answer = {"connector": version, "results": [_answer(spark, entry) for entry in json.loads(line)]}
            except Exception:  # the test that asked reports it; the child serves the next one
                answer = {"failed": traceback.format_exc()}
            print(ANSWER + json.dumps(answer), flush=True)
    finally:
        spark.stop()


def _answer(spark, entry: dict):
    try:
        return _run(spark, entry)
    except Exception as exc:  # any failure of the built-in is its answer
        if not entry.get("expect_error"):
            raise
        return {"error": str(exc)}


def _run(spark, read: dict) -> list:
    options = read["options"]
    if "write" in read:
        spark.createDataFrame(read["write"], read.get("schema", "key string, value string")).write \
            .format("kafka").options(**options).mode("append").save()
        return []
    df = spark.read.format("kafka").options(**options).load()
    headers = str(options.get("includeHeaders", "false")).lower() == "true"
    return [list(r) for r in normalized(df, headers)]


if __name__ == "__main__":
    main()
