"""Read topics with Spark's built-in Kafka source in a separate process; rows as JSON.

One JVM holds one SparkContext, and the built-in connector needs its jars on that
context's class path, so side-by-side tests run the built-in reads here, in a child
process, and compare the rows with what ``format("kafka_eos")`` returns in the test's own
session. Rows are normalized by :data:`NORMALIZE` (binary as base64, timestamp as epoch
microseconds, headers as JSON) so both sides compare as plain values.

    python -m integration.builtin_rows SPEC.json OUT.json
    SPEC = [{"options": {...}}, ...]   # batch reads of format("kafka")
    an entry {"write": [[key, value], ...], "options": {...}} is a batch write instead
    (its result is an empty list; "schema" gives other columns, e.g. a partition);
    with "expect_error": true, an entry that fails gives {"error": message} as its result
"""

from __future__ import annotations

import json
import sys
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


def main(spec_path: str, out_path: str) -> None:
    from integration.builtin_kafka import builtin_kafka_jars
    from integration.conftest import spark_builder

    jars, version = builtin_kafka_jars()
    spark = spark_builder("builtin-kafka-rows", jars).getOrCreate()
    try:
        results = []
        for read in json.loads(Path(spec_path).read_text()):
            try:
                results.append(_run(spark, read))
            except Exception as exc:  # any failure of the built-in is its answer
                if not read.get("expect_error"):
                    raise
                results.append({"error": str(exc)})
        Path(out_path).write_text(json.dumps({"connector": version, "results": results}))
    finally:
        spark.stop()


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
    main(sys.argv[1], sys.argv[2])
