"""Sink benchmark: write throughput and the driver's commit latency.

    python -m integration.bench.bench_sink --bootstrap B [--records 1000000] [--size 100] [--rounds 3]

1. Throughput: the same generated DataFrame (key, value of ``--size`` bytes, 4 tasks)
   written as a batch job by kafka_eos exactly_once, kafka_eos at_least_once and Spark's
   built-in sink (``format("kafka")``, jars from Maven Central), in one SparkSession,
   alternated round by round so machine drift hits every variant alike.
2. Commit latency: the driver's ``commit(messages, N)`` for 1, 8 and 32 pre-committed
   transactions (each holding one record), as Spark's commit process runs it: connect,
   read the latest decision, write ``decided``, EndTxn each, write ``done``. Also the
   per-batch recovery (read the decision, list open transactions).

Assumes a quiet machine; prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from integration.helpers import create_topic


def sink_write(spark, fmt: str, bootstrap: str, records: int, size: int, out_topic: str,
               guarantee: str = "exactly_once", partitions: int = 4) -> float:
    """Write ``records`` generated rows (key, value of ``size`` bytes) as a batch job; seconds."""
    df = (spark.range(0, records, 1, partitions)
          .selectExpr("cast(id % 1000 as string) as key",
                      f"concat(cast(id as string), '|', repeat('x', {max(size - 12, 1)})) as value"))
    # Python data sources accept only append/overwrite save modes (a Spark rule).
    writer = df.write.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
    if fmt == "kafka_eos":
        writer = writer.mode("append").option("deliveryGuarantee", guarantee) \
            .option("transactionalIdPrefix", _name("bench"))
    started = time.perf_counter()
    writer.save()
    return time.perf_counter() - started


def throughput(bootstrap: str, records: int, size: int, rounds: int) -> dict[str, list[float]]:
    import kafka_eos_ds
    from integration.builtin_kafka import builtin_kafka_jars
    from integration.conftest import spark_builder

    jars, version = builtin_kafka_jars()
    spark = spark_builder("bench-sink", jars=jars).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_eos_ds.register(spark)
    variants = {
        "kafka_eos exactly_once": dict(fmt="kafka_eos", guarantee="exactly_once"),
        "kafka_eos at_least_once": dict(fmt="kafka_eos", guarantee="at_least_once"),
        f"built-in format(\"kafka\") {version}": dict(fmt="kafka"),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    try:
        sink_write(spark, "kafka_eos", bootstrap, 10_000, size, create_topic(bootstrap, _name("warm"), 4))
        sink_write(spark, "kafka", bootstrap, 10_000, size, create_topic(bootstrap, _name("warm"), 4))
        for _ in range(rounds):
            for name, kw in variants.items():
                topic = create_topic(bootstrap, _name("bench-sink"), 4)
                seconds[name].append(sink_write(spark, bootstrap=bootstrap, records=records, size=size,
                                                out_topic=topic, **kw))
    finally:
        spark.stop()
    return seconds


def commit_latency(bootstrap: str, transactions: int, repeats: int) -> list[float]:
    from confluent_kafka import Producer

    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
    from kafka_eos_ds.kafka.decision_log import KafkaDecisionLog
    from kafka_eos_ds.sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase import Participant, TwoPhaseCommitter

    topic = create_topic(bootstrap, _name("bench-commit"), 4)
    prefix = _name("bench-commit")
    conf = {"bootstrap.servers": bootstrap}
    out = []
    for batch in range(repeats):
        participants = []
        for part in range(transactions):
            stats = {}
            tid = f"{prefix}-{part}-0"
            p = Producer({**conf, "transactional.id": tid, "statistics.interval.ms": 50,
                          "stats_cb": lambda s, d=stats: d.update(json.loads(s)["eos"])})
            p.init_transactions(30)
            while stats.get("idemp_state") != "Assigned":
                p.poll(0.01)
            p.begin_transaction()
            p.produce(topic, b"x")
            p.flush(30)
            participants.append(Participant(tid, part, 0, 1, {"producer_id": stats["producer_id"],
                                                              "epoch": stats["producer_epoch"]}))
            del p
        started = time.perf_counter()
        coordinator = TransactionCoordinator(conf)
        log = KafkaDecisionLog(conf, "_kafka_eos_commit_log", prefix)
        TwoPhaseCommitter(log, KafkaTransactions(coordinator, prefix, 900_000)).commit("bench", batch, participants)
        log.close()
        coordinator.close()
        out.append(time.perf_counter() - started)
    return out


def recovery_cost(bootstrap: str, repeats: int) -> list[float]:
    import pickle

    from pyspark.sql.types import StringType, StructField, StructType

    from kafka_eos_ds.sink.writers import KafkaStreamWriter

    topic = create_topic(bootstrap, _name("bench-recover"), 1)
    schema = StructType([StructField("value", StringType())])
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "transactionalIdPrefix": _name("bench-rec")}
    out = []
    for _ in range(repeats):
        writer = KafkaStreamWriter(schema, opts)
        started = time.perf_counter()
        pickle.dumps(writer)
        out.append(time.perf_counter() - started)
    return out


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench_sink")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commit-repeats", type=int, default=20)
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args(argv)

    print("## Sink write\n")
    if not args.skip_throughput:
        seconds = throughput(args.bootstrap, args.records, args.size, args.rounds)
        base = next(statistics.median(v) for k, v in seconds.items() if k.startswith("built-in"))
        print(f"{args.records:,} records of {args.size} bytes, 4 tasks, batch write, median of {args.rounds}:\n")
        print("| sink | median s | records/s | vs built-in | runs (s) |\n|---|---|---|---|---|")
        for name, values in seconds.items():
            med = statistics.median(values)
            print(f"| {name} | {med:.2f} | {args.records / med:,.0f} | {base / med:.2f}x | "
                  f"{', '.join(f'{v:.2f}' for v in values)} |")
    print("\nDriver commit latency per batch (connect, read decision, write decided, EndTxn each, "
          "write done):\n")
    print("| transactions | p50 ms | p99 ms | runs |\n|---|---|---|---|")
    for k in (1, 8, 32):
        values = commit_latency(args.bootstrap, k, args.commit_repeats if k < 32 else max(5, args.commit_repeats // 2))
        print(f"| {k} | {_pct(values, 0.5) * 1000:.0f} | {_pct(values, 0.99) * 1000:.0f} | {len(values)} |")
    rec = recovery_cost(args.bootstrap, args.commit_repeats)
    print(f"\nPer-batch recovery (planner; metadata, latest decision, ListTransactions): "
          f"p50 {_pct(rec, 0.5) * 1000:.0f} ms, p99 {_pct(rec, 0.99) * 1000:.0f} ms ({len(rec)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
