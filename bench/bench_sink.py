"""Sink micro-benchmarks: the driver's commit latency and the per-batch recovery cost.

    python -m bench.bench_sink --bootstrap B [--commit-repeats 20]

Sink throughput, and the per-batch commit latency of real streaming runs, are measured by
the full harness (``python -m bench.run --only sink,pipeline``). This script
isolates the driver's side for a given number of transactions:

1. Commit latency: the driver's ``commit(messages, N)`` for 1, 8 and 32 pre-committed
   transactions (each holding one record), as Spark's commit process runs it: connect,
   read the latest decision, write ``decided``, EndTxn each, write ``done``.
2. The per-batch recovery on the planner (read the decision, list open transactions).

Prints Markdown for docs/dev/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from bench.run import percentile
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_tools.topics import create_topic


def commit_latency(bootstrap: str, transactions: int, repeats: int) -> list[float]:
    from confluent_kafka import Producer

    from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase import Kind, Participant, TwoPhaseCommitter, WriteId

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
            participants.append(Participant(tid, part, 0, 1,
                                            KafkaHandle(stats["producer_id"], stats["producer_epoch"])))
            del p
        started = time.perf_counter()
        coordinator = TransactionCoordinator(conf)
        log = KafkaDecisionLog(conf, "_kafka_eos_commit_log", prefix)
        TwoPhaseCommitter(log, KafkaTransactions(coordinator, prefix, 900_000)).commit(
            WriteId(Kind.STREAM, "bench", batch), participants)
        log.close()
        coordinator.close()
        out.append(time.perf_counter() - started)
    return out


def recovery_cost(bootstrap: str, repeats: int) -> list[float]:
    import pickle

    from pyspark.sql.types import StringType, StructField, StructType

    from kafka_eos_ds.kafka_sink import stream_writer

    topic = create_topic(bootstrap, _name("bench-recover"), 1)
    schema = StructType([StructField("value", StringType())])
    opts = {"kafka.bootstrap.servers": bootstrap, "topic": topic, "transactionalIdPrefix": _name("bench-rec")}
    out = []
    for _ in range(repeats):
        writer = stream_writer(schema, opts)
        started = time.perf_counter()
        pickle.dumps(writer)
        out.append(time.perf_counter() - started)
    return out


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench_sink")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--commit-repeats", type=int, default=20)
    args = parser.parse_args(argv)

    print("Driver commit latency per batch (connect, read decision, write decided, EndTxn each, write done):\n")
    print("| transactions | p50 ms | p99 ms | runs |\n|---|---|---|---|")
    for k in (1, 8, 32):
        values = commit_latency(args.bootstrap, k, args.commit_repeats if k < 32 else max(5, args.commit_repeats // 2))
        print(f"| {k} | {percentile(values, 0.5) * 1000:.0f} | {percentile(values, 0.99) * 1000:.0f} | {len(values)} |")
    rec = recovery_cost(args.bootstrap, args.commit_repeats)
    print(f"\nPer-batch recovery (planner; metadata, latest decision, ListTransactions): "
          f"p50 {percentile(rec, 0.5) * 1000:.0f} ms, p99 {percentile(rec, 0.99) * 1000:.0f} ms ({len(rec)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
