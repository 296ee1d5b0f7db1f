"""Source read throughput: ``format("kafka_eos")`` vs the built-in ``format("kafka")``.

    python -m integration.bench.bench_source [--bootstrap host:9092] [--reps 3] [--partitions 4]

One topic per record size (100 B and 1 KiB values, keys of 1-3 bytes), read whole with
``Trigger.AvailableNow`` into Spark's ``noop`` sink, so the figure covers what a streaming
query pays (offset planning, the per-batch commit, reading, Arrow hand-over to the JVM)
and nothing downstream. Variants alternate A B, B A, ... so machine drift lands on both.
Reported: median records/s, the ratio kafka_eos / built-in, and the peak memory rise of
Spark's Python workers (the built-in runs no Python, so its rise is about zero). Both
read with ``kafka.isolation.level=read_committed`` (kafka_eos's default) so they do the
same work. Prints a Markdown table (for docs/benchmarks.md) and writes JSON with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from integration.bench import workloads as w
from integration.bench.memory import WorkerMemory
from integration.bench.run import _seeded_topic, _spark


def read_all(spark, fmt: str, bootstrap: str, topic: str) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-src-") as ckpt:
        started = time.perf_counter()
        query = (spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed").load()
                 .writeStream.format("noop").option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.bench.bench_source")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--mb", type=int, default=100, help="megabytes of values per topic")
    parser.add_argument("--out", help="write results JSON here")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from integration.builtin_kafka import builtin_kafka_jars

    jars, connector = builtin_kafka_jars()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kafka_eos_ds.broker.cluster import EmbeddedKafka

        cluster = EmbeddedKafka(tempfile.mkdtemp(prefix="bench-kafka-"), brokers=1)
        bootstrap = cluster.start()
    spark = _spark(jars)
    rows = []
    try:
        for size in (100, 1024):
            records = args.mb * 1_000_000 // size
            topic = _seeded_topic(bootstrap, size, args.partitions, records, 1)
            read_all(spark, w.EOS, bootstrap, topic)  # warm-up: JVM, Python workers, page cache
            read_all(spark, w.BUILTIN, bootstrap, topic)
            seconds = {w.EOS: [], w.BUILTIN: []}
            memory = {w.EOS: 0.0, w.BUILTIN: 0.0}
            for rep in range(args.reps):
                for fmt in ((w.EOS, w.BUILTIN) if rep % 2 == 0 else (w.BUILTIN, w.EOS)):
                    with WorkerMemory() as mem:
                        secs = read_all(spark, fmt, bootstrap, topic)
                    seconds[fmt].append(secs)
                    memory[fmt] = max(memory[fmt], mem.peak_one / 1e6)
                    print(f"{size:>5} B {fmt:<10} {records:>9,} rec {secs:6.2f}s {records / secs:>11,.0f} rec/s "
                          f"largest worker {mem.peak_one / 1e6:.0f} MB", flush=True)
            eos = records / statistics.median(seconds[w.EOS])
            builtin = records / statistics.median(seconds[w.BUILTIN])
            rows.append({"size": size, "partitions": args.partitions, "records": records, "kafka_eos_rps": eos,
                         "builtin_rps": builtin, "ratio": eos / builtin, "seconds": seconds,
                         "kafka_eos_worker_mb": memory[w.EOS], "builtin_worker_mb": memory[w.BUILTIN]})
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()
    import pyspark

    print(f"\n{os.cpu_count()} cores, pyspark {pyspark.__version__}, built-in connector {connector}, "
          f"{args.partitions} partitions, median of {args.reps}\n")
    print("| record | records | kafka_eos records/s | built-in records/s | ratio | kafka_eos largest Python worker MB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['size']} B | {r['records']:,} | {r['kafka_eos_rps']:,.0f} | {r['builtin_rps']:,.0f} | "
              f"{r['ratio']:.2f}x | {r['kafka_eos_worker_mb']:.0f} |")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"connector": connector, "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
