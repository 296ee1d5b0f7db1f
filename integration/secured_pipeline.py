"""The Kafka -> Spark -> Kafka pipeline of the security tests, as a driver process.

    python -m integration.secured_pipeline SPEC.json

SPEC names the format (``kafka_eos``, or ``kafka`` for Spark's built-in connector), the
option map used for both the reader and the writer, the topics, the consumer group, the
transactional id prefix and the checkpoint. The query reads the input from the earliest
offsets, upper-cases the value and runs with ``availableNow``. The ``kafka_eos_ds`` loggers
print at DEBUG (the caller's sitecustomize), Spark's log4j at its default level, and the
query's exception and progress are printed and written to SPEC's ``result`` file, so the
caller can search all of it for secrets.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    # The caller's sitecustomize sends kafka_eos_ds records at DEBUG to stderr, here and in
    # Spark's Python workers; everything else Python logs goes there too.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)

    from kafka_eos_tools.spark_session import spark_builder

    jars = None
    if spec["format"] == "kafka":
        from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

        jars = builtin_kafka_jars()[0]
    spark = spark_builder("kafka-eos-secured", jars).getOrCreate()
    if spec["format"] == "kafka_eos":
        import kafka_eos_ds

        kafka_eos_ds.register(spark)
    result: dict = {"exception": None, "progress": []}
    query = None
    try:
        options = spec["options"]
        reader = (spark.readStream.format(spec["format"]).options(**options)
                  .option("subscribe", spec["input"]).option("startingOffsets", "earliest")
                  .option("kafka.group.id", spec["group"]).option("maxOffsetsPerTrigger", "200"))
        out = reader.load().selectExpr("key", "upper(cast(value as string)) as value")
        writer = (out.writeStream.format(spec["format"]).options(**options).options(**spec.get("sink_options", {}))
                  .option("topic", spec["output"])
                  .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True))
        if spec["format"] == "kafka_eos":
            writer = writer.option("transactionalIdPrefix", spec["prefix"])
        query = writer.start()
        if not query.awaitTermination(spec["timeout"]):
            result["exception"] = f"the query did not finish within {spec['timeout']} s"
        elif query.exception() is not None:
            result["exception"] = str(query.exception())
        result["progress"] = [json.loads(p.json) if hasattr(p, "json") else dict(p) for p in query.recentProgress]
    except Exception as exc:  # a driver-side error at start: reported like a query's
        result["exception"] = f"{type(exc).__name__}: {exc}"
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()
    print("QUERY EXCEPTION:", result["exception"])
    print("QUERY PROGRESS:", json.dumps(result["progress"][-1:] if result["progress"] else None))
    Path(spec["result"]).write_text(json.dumps(result))
    return 0 if result["exception"] is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
