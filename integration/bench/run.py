"""Run the benchmarks and write JSON, a Markdown table and PNG charts.

    python -m integration.bench.run --profile full [--bootstrap host:9092] [--out docs/bench]
    python -m integration.bench.run --profile smoke --out /tmp/bench   # what CI runs

Every configuration (workload x record size x partitions) is measured ``reps`` times;
within a repetition the variants run back to back in alternating order (A B C, C B A,
...), so drift of the machine lands on all of them. Reported: median records/s and MB/s,
the ratio to Spark's built-in connector and to the raw confluent-kafka ceiling, and the
peak memory of Spark's Python workers. No figure here is a pass/fail criterion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from integration.bench import workloads as w
from integration.bench.memory import WorkerMemory
from integration.helpers import create_topic, produce


@dataclass(frozen=True)
class Profile:
    sizes: tuple[int, ...]
    partitions: tuple[int, ...]          # the main matrix uses the first value
    scaling_partitions: tuple[int, ...]  # the scaling chart (1 KiB records)
    bytes_per_run: int
    min_records: int
    reps: int


PROFILES = {
    "smoke": Profile((100,), (2,), (), 400_000, 2_000, 1),
    "full": Profile((100, 1024, 10240), (4,), (1, 4, 8, 16, 32), 100_000_000, 20_000, 3),
}


@dataclass
class Measurement:
    workload: str
    variant: str
    size: int
    partitions: int
    records: int
    seconds: list
    worker_peak_mb: float = 0.0
    worker_largest_mb: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def records_per_s(self) -> float:
        return self.records / self.median

    @property
    def mb_per_s(self) -> float:
        return self.records * self.size / self.median / 1e6


def _records_for(profile: Profile, size: int) -> int:
    return max(profile.min_records, profile.bytes_per_run // size)


def _spark(jars: str):
    from integration.conftest import spark_builder

    import kafka_eos_ds

    spark = spark_builder("kafka-eos-bench", jars).config("spark.driver.memory", "2g").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_eos_ds.register(spark)
    return spark


def _seeded_topic(bootstrap: str, size: int, partitions: int, records: int, replication: int) -> str:
    topic = create_topic(bootstrap, f"bench-in-{size}-{partitions}-{uuid.uuid4().hex[:6]}", partitions, replication)
    value = b"x" * size
    produce(bootstrap, topic, ({"key": str(i % 1000).encode(), "value": value} for i in range(records)),
            **{"batch.size": 1_000_000, "linger.ms": 20})
    return topic


def measure(spark, bootstrap: str, profile: Profile, replication: int, log,
            only: tuple[str, ...] = ()) -> list[Measurement]:
    results: list[Measurement] = []
    configs = [(size, profile.partitions[0]) for size in profile.sizes]
    configs += [(1024, p) for p in profile.scaling_partitions if (1024, p) not in configs]
    for size, partitions in configs:
        records = _records_for(profile, size)
        topic = _seeded_topic(bootstrap, size, partitions, records, replication)
        out = lambda: create_topic(bootstrap, f"bench-out-{uuid.uuid4().hex[:8]}", partitions, replication)
        max_offsets = max(records // 10, 1)
        variants = {
            ("source", "kafka_eos"): lambda: w.source_read(spark, w.EOS, bootstrap, topic),
            ("source", "builtin"): lambda: w.source_read(spark, w.BUILTIN, bootstrap, topic),
            ("source", "raw"): lambda: w.raw("consume", bootstrap=bootstrap, topic=topic, partitions=partitions),
            ("sink", "kafka_eos exactly_once"): lambda: w.sink_write(spark, w.EOS, bootstrap, records, size, out(),
                                                                   "exactly_once", partitions),
            ("sink", "kafka_eos at_least_once"): lambda: w.sink_write(spark, w.EOS, bootstrap, records, size, out(),
                                                                    "at_least_once", partitions),
            ("sink", "builtin"): lambda: w.sink_write(spark, w.BUILTIN, bootstrap, records, size, out(),
                                                      partitions=partitions),
            ("sink", "raw"): lambda: w.raw("produce", bootstrap=bootstrap, out_topic=out(), records=records,
                                           size=size),
            ("pipeline", "kafka_eos exactly_once"): lambda: w.pipeline(spark, w.EOS, bootstrap, topic, out(),
                                                                       max_offsets),
            ("pipeline", "builtin"): lambda: w.pipeline(spark, w.BUILTIN, bootstrap, topic, out(), max_offsets),
            ("pipeline", "raw"): lambda: w.raw("forward", bootstrap=bootstrap, topic=topic, out_topic=out(),
                                               partitions=partitions),
        }
        if (size, partitions) != configs[0] and size == 1024 and partitions not in profile.partitions:
            # Scaling points: the source and the exactly-once sink against the built-in.
            variants = {k: v for k, v in variants.items() if k[1] in ("kafka_eos", "builtin",
                                                                      "kafka_eos exactly_once")}
        if only:
            variants = {k: v for k, v in variants.items() if any(o in k[1] for o in only)}
        table = {key: Measurement(key[0], key[1], size, partitions, records, []) for key in variants}
        order = list(variants)
        for rep in range(profile.reps):
            for key in (order if rep % 2 == 0 else order[::-1]):
                with WorkerMemory() as mem:
                    seconds = variants[key]()
                table[key].seconds.append(seconds)
                table[key].worker_peak_mb = max(table[key].worker_peak_mb, mem.peak_total / 1e6)
                table[key].worker_largest_mb = max(table[key].worker_largest_mb, mem.peak_one / 1e6)
                log(f"{key[0]:<9} {key[1]:<26} {size:>6} B x{partitions:<3} {records:>9,} rec "
                    f"{seconds:7.2f}s {records / seconds:>12,.0f} rec/s")
        results.extend(table.values())
    return results


def ratios(results: list[Measurement]) -> list[dict]:
    rows = []
    index = {(m.workload, m.variant, m.size, m.partitions): m for m in results}
    for m in results:
        builtin = index.get((m.workload, "builtin", m.size, m.partitions))
        raw = index.get((m.workload, "raw", m.size, m.partitions))
        rows.append({**asdict(m), "median_s": m.median, "records_per_s": m.records_per_s, "mb_per_s": m.mb_per_s,
                     "vs_builtin": (m.records_per_s / builtin.records_per_s) if builtin else None,
                     "vs_raw": (m.records_per_s / raw.records_per_s) if raw else None})
    return rows


def markdown(rows: list[dict], machine: dict) -> str:
    lines = [f"Machine: {machine['cpus']} cores, {machine['python']}, pyspark {machine['pyspark']}, "
             f"built-in connector {machine['builtin_connector']}, Kafka at {machine['kafka']}; "
             f"{machine['date']}.", "",
             "| workload | variant | record | partitions | records | median s | records/s | MB/s | "
             "vs built-in | vs raw client | Python workers: rise MB | largest worker MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda x: "" if x is None else f"{x:.2f}x"
    for r in rows:
        lines.append(f"| {r['workload']} | {r['variant']} | {r['size']} B | {r['partitions']} | {r['records']:,} | "
                     f"{r['median_s']:.2f} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
                     f"{fmt(r['vs_builtin'])} | {fmt(r['vs_raw'])} | {r['worker_peak_mb']:.0f} | "
                     f"{r['worker_largest_mb']:.0f} |")
    return "\n".join(lines) + "\n"


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def charts(rows: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    main = [r for r in rows if r["partitions"] == rows[0]["partitions"]]
    sizes = sorted({r["size"] for r in main})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, workload in zip(axes, ("source", "sink", "pipeline")):
        variants = sorted({r["variant"] for r in main if r["workload"] == workload})
        for i, variant in enumerate(variants):
            ys = [next((r["mb_per_s"] for r in main if r["workload"] == workload and r["variant"] == variant
                        and r["size"] == s), 0) for s in sizes]
            ax.bar([x + i * 0.8 / len(variants) for x in range(len(sizes))], ys, 0.8 / len(variants), label=variant)
        ax.set_xticks([x + 0.4 - 0.4 / max(len(variants), 1) for x in range(len(sizes))], [f"{s} B" for s in sizes])
        ax.set_title(workload)
        ax.set_ylabel("MB/s")
        ax.legend(fontsize=7)
    written.append(_save(plt, fig, out / "throughput.png"))
    scaling = [r for r in rows if r["size"] == 1024]
    parts = sorted({r["partitions"] for r in scaling})
    if len(parts) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for workload, variant in sorted({(r["workload"], r["variant"]) for r in scaling
                                         if r["variant"] != "raw"}):
            pts = sorted((r["partitions"], r["records_per_s"]) for r in scaling
                         if r["workload"] == workload and r["variant"] == variant)
            if len(pts) > 1:
                ax.plot([p for p, _ in pts], [v for _, v in pts], marker="o", label=f"{workload}: {variant}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("Kafka partitions")
        ax.set_ylabel("records/s (1 KiB records)")
        ax.legend(fontsize=7)
        written.append(_save(plt, fig, out / "scaling.png"))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m integration.bench.run")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated variant substrings to run (default: all)")
    parser.add_argument("--out", default=None, help="output directory (default: a temp dir for smoke, docs/bench for full)")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    out = Path(args.out or ("docs/bench" if args.profile == "full" else tempfile.mkdtemp(prefix="bench-")))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from integration.builtin_kafka import builtin_kafka_jars

    jars, connector = builtin_kafka_jars()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kafka_eos_ds.broker.cluster import EmbeddedKafka

        cluster = EmbeddedKafka(tempfile.mkdtemp(prefix="bench-kafka-"), brokers=args.brokers)
        bootstrap = cluster.start()
    import pyspark

    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
               "builtin_connector": connector, "kafka": "embedded" if cluster else bootstrap,
               "date": time.strftime("%Y-%m-%d"), "profile": args.profile}
    spark = _spark(jars)
    try:
        results = measure(spark, bootstrap, profile, min(args.brokers, 3), lambda s: print(s, flush=True),
                          tuple(filter(None, args.only.split(","))))
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()
    rows = ratios(results)
    (out / "results.json").write_text(json.dumps({"machine": machine, "results": rows}, indent=2))
    (out / "results.md").write_text(markdown(rows, machine))
    written = charts(rows, out)
    print(markdown(rows, machine))
    print("wrote", out / "results.json", out / "results.md", *written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
