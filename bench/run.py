"""Run the benchmarks and write JSON, a Markdown table and PNG charts.

    python -m bench.run --profile full [--bootstrap host:9092] [--out bench/results]
    python -m bench.run --profile smoke --out /tmp/bench   # what CI runs
    python -m bench.run --profile full --only source --sizes 100,1024 --no-scaling \\
        [--baseline-read HEAD]                                          # a targeted run

Workloads: ``source`` (AvailableNow read into Spark's ``noop`` sink), ``sink`` (batch
write, exactly-once and at-least-once) and ``pipeline`` (Kafka -> Spark -> Kafka with
AvailableNow in micro-batches: kafka_eos source + exactly-once sink against the built-in
source + built-in at-least-once sink), each against Spark's built-in connector and the
raw confluent-kafka ceiling (plain processes, see ``workloads.RAW_SCRIPT``).

Every configuration (workload x record size x partitions x micro-batch size) is measured
``reps`` times after one warm-up of each Spark variant; within a repetition the variants
run back to back in alternating order (A B C, C B A, ...), so drift of the machine lands
on all of them. Reported: median records/s and MB/s, the ratios to the built-in and to
the ceiling, the project's targets, the per-batch driver commit latency of the
exactly-once sink (p50/p99), the peak memory of Spark's Python workers and the load
average. No figure here is a pass/fail criterion.
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench import formats
from bench import workloads as w
from bench.memory import WorkerMemory
from kafka_eos_tools.topics import create_topic, produce

# Sink workloads by the columns they write (workloads.sink_write's ``columns``).
SINK_COLUMNS = {"sink": "key,value", "sink value": "value", "sink headers": "key,value,headers"}
# Table workloads (Kafka -> Spark -> Parquet files) by whether the table is partitioned.
TABLES = {"table": False, "table partitioned": True}
# The pipeline's floors (main matrix): the kafka_eos source, or the built-in one, into
# bench.formats' Python no-op sink.
FLOOR_EOS = "floor: kafka_eos -> python no-op"
FLOOR_BUILTIN = "floor: built-in -> python no-op"
# Pipeline variants of the main matrix only, and only where the profile asks for them.
PIPELINE_EXTRAS = ("kafka_eos at_least_once", FLOOR_EOS, FLOOR_BUILTIN)
# Variants whose sink steps are timed (bench.formats: a CommitLog per run).
TIMED_VARIANTS = ("kafka_eos exactly_once", "kafka_eos_file")
# Workloads that run as streaming queries in micro-batches (the batches column, the timeline).
MICRO_BATCHED = ("pipeline", *TABLES)

@dataclass(frozen=True)
class Profile:
    sizes: tuple[int, ...]               # record sizes of the main matrix
    partitions: int                      # partitions of the main matrix
    scaling_partitions: tuple[int, ...]  # 1 KiB records: throughput and commit latency vs partitions
    batches: tuple[int, ...]             # micro-batches per pipeline run; the first is the main matrix's
    bytes_per_run: int
    min_records: int
    reps: int
    warmup: bool = True
    sink_columns: tuple[str, ...] = tuple(SINK_COLUMNS)  # the sink workloads of the main matrix
    tables: tuple[str, ...] = tuple(TABLES)              # the table workloads of the main matrix
    pipeline_extras: bool = True  # the main matrix's at-least-once pipeline and the pipeline floors


PROFILES = {
    "smoke": Profile((100,), 2, (), (2,), 400_000, 2_000, 1, warmup=False, sink_columns=("sink",),
                     tables=("table partitioned",), pipeline_extras=False),
    # Estimated ~19 min on 2 cores at load 3-7, 25-30 min on busier shared cores, before the
    # table workloads, which the estimate puts at ~5 min more (see docs/dev/benchmarks.md);
    # the run prints its estimate first and the time left as it goes.
    "full": Profile((100, 1024, 10240), 4, (1, 8, 16, 32), (10, 3, 30), 100_000_000, 5_000, 2),
}

# Project targets: (workload, variant) -> [(against, minimum ratio)].
TARGETS = {
    ("source", "kafka_eos"): [("builtin", 1.0)],
    ("sink", "kafka_eos exactly_once"): [("builtin", 0.9)],
    ("sink headers", "kafka_eos exactly_once"): [("builtin", 0.9)],
    ("pipeline", "kafka_eos exactly_once"): [("builtin", 0.8), ("raw", 0.5)],
}


@dataclass(frozen=True)
class Config:
    size: int
    partitions: int
    batches: int
    records: int
    workloads: tuple[str, ...]
    main: bool  # the main matrix: also the raw ceiling and the at-least-once sink


@dataclass
class Measurement:
    workload: str
    variant: str
    size: int
    partitions: int
    batches: int
    records: int
    seconds: list = field(default_factory=list)
    in_batches_s: list = field(default_factory=list)
    commit_s: list = field(default_factory=list)
    # The per-batch timeline (kafka_eos: its steps, formats._TimedCommit; streaming:
    # Spark's durationMs of each micro-batch), every batch of every run.
    prepare_s: list = field(default_factory=list)
    task_s: list = field(default_factory=list)
    task_input_s: list = field(default_factory=list)
    spark_ms: dict = field(default_factory=dict)
    load: list = field(default_factory=list)
    failures: list = field(default_factory=list)
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

    @property
    def in_batch_records_per_s(self) -> float | None:
        return self.records / statistics.median(self.in_batches_s) if self.in_batches_s else None


def _records_for(profile: Profile, size: int) -> int:
    return max(profile.min_records, profile.bytes_per_run // size)


def plan(profile: Profile, scaling: bool = True) -> list[Config]:
    """The main matrix, then the partition and micro-batch scaling points (1 KiB records)."""
    everything = ("source", "sink", "pipeline")
    # The main matrix also writes each record's value alone and with a header, next to
    # the keyed write ("sink", key + value: what most pipelines write).
    main = ("source", *profile.sink_columns, "pipeline", *profile.tables)
    configs = [Config(s, profile.partitions, profile.batches[0], _records_for(profile, s), main, True)
               for s in profile.sizes]
    if scaling:
        configs += [Config(1024, p, profile.batches[0], _records_for(profile, 1024), everything, False)
                    for p in profile.scaling_partitions if p != profile.partitions]
        configs += [Config(1024, profile.partitions, b, _records_for(profile, 1024), ("pipeline",), False)
                    for b in profile.batches[1:]]
    return configs


# Rough seconds per run on 2 shared cores (load 3-7), for the printed estimate only:
# fixed part, per record, per task (per task and micro-batch in the pipeline; kafka_eos
# pays a Python worker and, exactly-once, a transactional producer per task), per batch.
_FIXED = {"source": 1.5, "sink": 1.5, "pipeline": 2.0, "table": 2.5, "raw": 0.5}
_PER_RECORD = {"source": 4e-6, "sink": 2e-6, "pipeline": 4e-6, "table": 4e-6, "raw": 1.5e-6}
_PER_TASK = {("source", True): 0.05, ("source", False): 0.25, ("sink", True): 0.13, ("sink", False): 0.01,
             ("pipeline", True): 0.15, ("pipeline", False): 0.045, ("table", True): 0.1, ("table", False): 0.03}
_PER_BATCH = {"kafka_eos exactly_once": 1.0, "kafka_eos_file": 0.8, "builtin": 0.35}


def estimate_s(configs: list[Config], profile: Profile, variants_of, warmup: bool = False) -> float:
    total = 60.0 if warmup else 0.0
    for c in configs:
        mb = c.records * c.size / 1e6
        total += 1 + c.records * 3e-6 + mb * 0.02  # seeding the input topic
        for workload, variant in variants_of(c):
            kind = ("raw" if variant == "raw" else "sink" if workload in SINK_COLUMNS
                    else "table" if workload in TABLES else workload)
            batches = c.batches if workload in MICRO_BATCHED else 1
            run = _FIXED[kind] + c.records * _PER_RECORD[kind] + mb * 0.01
            run += c.partitions * batches * _PER_TASK.get((kind, variant != "builtin"), 0.0)
            if kind in ("pipeline", "table"):
                run += batches * _PER_BATCH.get(variant, 0.35)
            total += run * profile.reps
    return total


def _seeded_topic(bootstrap: str, size: int, partitions: int, records: int, replication: int) -> str:
    topic = create_topic(bootstrap, f"bench-in-{size}-{partitions}-{uuid.uuid4().hex[:6]}", partitions, replication)
    value = b"x" * size
    produce(bootstrap, topic, ({"key": str(i % 1000).encode(), "value": value} for i in range(records)),
            **{"batch.size": 1_000_000, "linger.ms": 20})
    return topic


class Runner:
    def __init__(self, spark, bootstrap: str, profile: Profile, replication: int, log,
                 only: tuple[str, ...] = (), baseline: bool = False) -> None:
        self.spark, self.bootstrap, self.profile = spark, bootstrap, profile
        self.replication, self.log, self.only, self.baseline = replication, log, only, baseline
        self.topics: dict[tuple[int, int, int], str] = {}
        self.spare: dict[int, list[str]] = {}  # output topics created ahead, by partition count

    def _create_outputs(self, partitions: int, count: int) -> None:
        """Create the output topics of a configuration before its runs: a producer writing to
        a topic whose partitions the broker is still creating can fail (idempotent producers
        saw OutOfOrderSequence on a just-created 32-partition topic), and creating them
        between runs would time the broker's work."""
        pool = self.spare.setdefault(partitions, [])
        while len(pool) < count:
            pool.append(create_topic(self.bootstrap, f"bench-out-{uuid.uuid4().hex[:8]}", partitions, self.replication))

    def _out(self, partitions: int) -> str:
        self._create_outputs(partitions, 1)
        return self.spare[partitions].pop(0)

    def _input(self, c: Config) -> str:
        key = (c.size, c.partitions, c.records)
        if key not in self.topics:
            self.topics[key] = _seeded_topic(self.bootstrap, c.size, c.partitions, c.records, self.replication)
        return self.topics[key]

    def variants(self, c: Config, topic: str = "") -> dict:
        """(workload, variant) -> run(commits) -> Timing, for this configuration."""
        spark, bs, p, n = self.spark, self.bootstrap, c.partitions, c.records
        per_batch = max(1, -(-n // c.batches))
        out = {
            ("source", "kafka_eos"): lambda _: w.source_read(spark, w.EOS, bs, topic),
            ("source", "builtin"): lambda _: w.source_read(spark, w.BUILTIN, bs, topic),
            ("source", "raw"): lambda _: w.raw("consume", bootstrap=bs, topic=topic, partitions=p),
            ("sink", "raw"): lambda _: w.raw("produce", bootstrap=bs, out_topic=self._out(p), records=n,
                                             size=c.size, partitions=p),
            ("pipeline", "kafka_eos exactly_once"): lambda log: w.pipeline(spark, formats.TIMED, bs, topic,
                                                                           self._out(p), per_batch, log),
            ("pipeline", "builtin"): lambda _: w.pipeline(spark, w.BUILTIN, bs, topic, self._out(p), per_batch),
            ("pipeline", "kafka_eos at_least_once"): lambda _: w.pipeline(spark, w.EOS, bs, topic, self._out(p),
                                                                          per_batch, guarantee="at_least_once"),
            # The floors: each source into a Python sink that writes nothing (what a Python
            # sink pays per task and batch before it writes a record).
            ("pipeline", FLOOR_EOS): lambda _: w.pipeline(spark, formats.NOOP, bs, topic, self._out(p), per_batch,
                                                          source=w.EOS),
            ("pipeline", FLOOR_BUILTIN): lambda _: w.pipeline(spark, formats.NOOP, bs, topic, self._out(p),
                                                              per_batch, source=w.BUILTIN),
            ("pipeline", "raw"): lambda _: w.raw("forward", bootstrap=bs, topic=topic, out_topic=self._out(p),
                                                 partitions=p),
        }
        for sink, cols in SINK_COLUMNS.items():
            out[(sink, "kafka_eos exactly_once")] = lambda log, cols=cols: w.sink_write(
                spark, formats.TIMED, bs, n, c.size, self._out(p), "exactly_once", p, log, cols)
            out[(sink, "builtin")] = lambda _, cols=cols: w.sink_write(spark, w.BUILTIN, bs, n, c.size, self._out(p),
                                                                      partitions=p, columns=cols)
        for table, partitioned in TABLES.items():
            for variant, fmt in (("kafka_eos_file", formats.TIMED_FILE), ("builtin", w.PARQUET),
                                 ("python no-op sink", formats.NOOP)):
                out[(table, variant)] = lambda log, fmt=fmt, partitioned=partitioned: w.table_write(
                    spark, fmt, bs, topic, n, per_batch, partitioned, log)
        out[("sink", "kafka_eos at_least_once")] = lambda _: w.sink_write(spark, w.EOS, bs, n, c.size, self._out(p),
                                                                          "at_least_once", p)
        if self.baseline:
            out[("source", "kafka_eos baseline")] = lambda _: w.source_read(spark, formats.BASELINE, bs, topic)
        extras = c.main and self.profile.pipeline_extras
        keep = {k: v for k, v in out.items() if k[0] in c.workloads
                and (c.main or k[1] not in ("raw", "kafka_eos at_least_once"))
                and (extras or k[0] != "pipeline" or k[1] not in PIPELINE_EXTRAS)}
        if self.only:
            keep = {k: v for k, v in keep.items() if any(o in (k[0], k[0].split()[0]) or o in k[1] for o in self.only)}
        return keep

    def warm_up(self) -> None:
        """One small run of each Spark variant: JIT, class loading, Python workers."""
        c = Config(1024, self.profile.partitions, 2, 5_000, ("source", "sink", "pipeline", *TABLES), False)
        variants = self.variants(c, self._input(c))
        self._create_outputs(c.partitions, len(variants))
        for key, run in variants.items():
            try:
                timing = run(formats.CommitLog() if key[1] in TIMED_VARIANTS else None)
                self.log(f"warm-up {key[0]:<9} {key[1]:<26} {timing.seconds:6.2f}s")
            except Exception as exc:
                self.log(f"warm-up {key[0]:<9} {key[1]:<26} FAILED: {str(exc).splitlines()[0][:300]}")

    def measure(self, c: Config) -> list[Measurement]:
        variants = self.variants(c, self._input(c))
        self._create_outputs(c.partitions, sum(k[0] not in ("source", *TABLES) for k in variants) * self.profile.reps)
        time.sleep(2)  # let the broker finish creating the partitions' logs
        table = {k: Measurement(k[0], k[1], c.size, c.partitions, c.batches, c.records) for k in variants}
        order = list(variants)
        for rep in range(self.profile.reps):
            for key in (order if rep % 2 == 0 else order[::-1]):
                commits = formats.CommitLog() if key[1] in TIMED_VARIANTS else None
                m = table[key]
                m.load.append(os.getloadavg()[0])
                try:
                    with WorkerMemory() as mem:
                        timing = variants[key](commits)
                except Exception as exc:  # one failed run must not lose a long run's results
                    m.failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                    self.log(f"{key[0]:<9} {key[1]:<26} {c.size:>6} B x{c.partitions:<3} FAILED: {m.failures[-1]}")
                    continue
                seconds = timing.seconds
                m.seconds.append(seconds)
                if timing.in_batches:
                    m.in_batches_s.append(timing.in_batches)
                for name, ms in (timing.batch_ms or {}).items():
                    m.spark_ms.setdefault(name, []).extend(ms)
                if commits:
                    commits.add_to(m)
                m.worker_peak_mb = max(m.worker_peak_mb, mem.peak_total / 1e6)
                m.worker_largest_mb = max(m.worker_largest_mb, mem.peak_one / 1e6)
                batches = f"{c.batches:>3} batches" if key[0] in MICRO_BATCHED else " " * 11
                self.log(f"{key[0]:<9} {key[1]:<26} {c.size:>6} B x{c.partitions:<3} {batches} "
                         f"{c.records:>9,} rec {seconds:7.2f}s {c.records / seconds:>12,.0f} rec/s  "
                         f"load {m.load[-1]:.1f}")
        return list(table.values())


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ratios(results: list[Measurement]) -> list[dict]:
    rows = []
    results = [m for m in results if m.seconds]
    index = {(m.workload, m.variant, m.size, m.partitions, m.batches): m for m in results}
    for m in results:
        base = {other: index.get((m.workload, other, m.size, m.partitions, m.batches)) for other in ("builtin", "raw")}
        vs = {other: (m.records_per_s / b.records_per_s) if b else None for other, b in base.items()}
        targets = [{"against": against, "min": minimum, "ratio": vs[against],
                    "met": None if vs[against] is None else vs[against] >= minimum}
                   for against, minimum in TARGETS.get((m.workload, m.variant), [])]
        p50, p99 = percentile(m.commit_s, 0.5), percentile(m.commit_s, 0.99)
        timeline = {f"spark {k}": percentile(v, 0.5) for k, v in sorted(m.spark_ms.items())}
        timeline.update({"prepare": percentile(m.prepare_s, 0.5) and percentile(m.prepare_s, 0.5) * 1000,
                         "task": percentile(m.task_s, 0.5) and percentile(m.task_s, 0.5) * 1000,
                         "task input": percentile(m.task_input_s, 0.5) and percentile(m.task_input_s, 0.5) * 1000,
                         "commit": p50 and p50 * 1000})
        rows.append({**asdict(m), "median_s": m.median, "records_per_s": m.records_per_s, "mb_per_s": m.mb_per_s,
                     "in_batch_records_per_s": m.in_batch_records_per_s,
                     "vs_builtin": vs["builtin"], "vs_raw": vs["raw"], "targets": targets,
                     "commit_p50_ms": p50 and p50 * 1000, "commit_p99_ms": p99 and p99 * 1000,
                     "load_median": statistics.median(m.load),
                     "timeline_p50_ms": {k: v for k, v in timeline.items() if v is not None}})
    return rows


def _target_cell(targets: list[dict]) -> str:
    names = {"builtin": "built-in", "raw": "ceiling"}
    cells = []
    for t in targets:
        if t["met"] is None:
            continue
        verdict = "met" if t["met"] else "**missed**"
        cells.append(f"{verdict} (>= {t['min']:.1f}x {names[t['against']]})")
    return "; ".join(cells)


def failures(results: list[Measurement]) -> list[str]:
    return [f"{m.workload} {m.variant} {m.size} B x{m.partitions} ({m.batches} batches): {f}"
            for m in results for f in m.failures]


def markdown(rows: list[dict], machine: dict, failed: list[str] = ()) -> str:
    def fmt(x, spec=".2f", unit="x"):
        return "" if x is None else f"{x:{spec}}{unit}"
    lines = [f"Machine: {machine['cpus']} cores, Python {machine['python']}, pyspark {machine['pyspark']}, "
             f"built-in connector {machine['builtin_connector']}, Kafka {machine['kafka']}; profile "
             f"{machine['profile']}, median of {machine['reps']} runs; {machine['date']}, "
             f"{machine['elapsed_min']:.0f} min.", "",
             "| workload | variant | record | partitions | batches | records | median s | records/s | MB/s | "
             "vs built-in | vs ceiling | vs target | in-batch records/s | commit p50 / p99 ms "
             "| Python workers: rise / largest MB | load avg |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        commit = "" if r["commit_p50_ms"] is None else f"{r['commit_p50_ms']:.0f} / {r['commit_p99_ms']:.0f}"
        batches = r["batches"] if r["workload"] in MICRO_BATCHED else ""
        lines.append(f"| {r['workload']} | {r['variant']} | {r['size']} B | {r['partitions']} | {batches} | "
                     f"{r['records']:,} | {r['median_s']:.2f} | {r['records_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
                     f"{fmt(r['vs_builtin'])} | {fmt(r['vs_raw'])} | {_target_cell(r['targets'])} | "
                     f"{fmt(r['in_batch_records_per_s'], ',.0f', '')} | {commit} | "
                     f"{r['worker_peak_mb']:.0f} / {r['worker_largest_mb']:.0f} | {r['load_median']:.1f} |")
    lines += timeline_markdown(rows)
    if failed:
        lines += ["", "Failed runs (left out of the medians):", ""] + [f"* {f}" for f in failed]
    return "\n".join(lines) + "\n"


# Columns of the per-batch timeline: Spark's steps of a micro-batch, then kafka_eos's
# inside addBatch. Medians over every batch of every run, in ms.
TIMELINE = [("spark triggerExecution", "batch"), ("spark latestOffset", "latestOffset"),
            ("spark queryPlanning", "planning"), ("spark walCommit", "walCommit"), ("spark addBatch", "addBatch"),
            ("prepare", "sink prepare"), ("task", "task"), ("task input", "task: waiting for input"),
            ("commit", "sink commit"), ("spark commitOffsets", "commitOffsets")]


def timeline_markdown(rows: list[dict]) -> list[str]:
    """The per-batch timeline of the micro-batched rows (medians per micro-batch, ms)."""
    rows = [r for r in rows if r["workload"] in MICRO_BATCHED and r.get("timeline_p50_ms")]
    if not rows:
        return []
    lines = ["", "Per-batch timeline of the micro-batched workloads (median ms per micro-batch; task: one task's "
             "write, input included):", "",
             "| workload | variant | record | partitions | batches | "
             + " | ".join(label for _, label in TIMELINE) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(TIMELINE)]
    for r in rows:
        cells = [r["timeline_p50_ms"].get(key) for key, _ in TIMELINE]
        lines.append(f"| {r['workload']} | {r['variant']} | {r['size']} B | {r['partitions']} | {r['batches']} | "
                     + " | ".join("" if c is None else f"{c:.0f}" for c in cells) + " |")
    return lines


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _curves(ax, rows: list[dict], x: str, y: str, label) -> bool:
    drawn = False
    for key in sorted({label(r) for r in rows}):
        pts = sorted((r[x], r[y]) for r in rows if label(r) == key and r[y] is not None)
        if len(pts) > 1:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=key)
            drawn = True
    if drawn:
        ax.legend(fontsize=7)
    return drawn


def charts(rows: list[dict], out: Path, profile: Profile) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    written = []
    main = [r for r in rows if r["partitions"] == profile.partitions and r["batches"] == profile.batches[0]]
    sizes = sorted({r["size"] for r in main})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, workload in zip(axes, ("source", "sink", "pipeline"), strict=False):
        variants = sorted({r["variant"] for r in main if r["workload"] == workload})
        for i, variant in enumerate(variants):
            ys = [next((r["mb_per_s"] for r in main if r["workload"] == workload and r["variant"] == variant
                        and r["size"] == s), 0) for s in sizes]
            ax.bar([x + i * 0.8 / len(variants) for x in range(len(sizes))], ys, 0.8 / len(variants), label=variant)
        ax.set_xticks([x + 0.4 - 0.4 / max(len(variants), 1) for x in range(len(sizes))], [f"{s} B" for s in sizes])
        ax.set_title(f"{workload} ({profile.partitions} partitions)")
        ax.set_ylabel("MB/s")
        if variants:
            ax.legend(fontsize=7)
    written.append(_save(plt, fig, out / "throughput.png"))

    spark_rows = [r for r in rows if r["size"] == 1024 and r["variant"] != "raw"]
    by_parts = [r for r in spark_rows if r["batches"] == profile.batches[0]]
    by_batch = [{**r, "per_batch": r["records"] / r["batches"]} for r in spark_rows
                if r["workload"] == "pipeline" and r["partitions"] == profile.partitions]
    def label(r):
        return f"{r['workload']}: {r['variant']}"
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    drawn = [
        _curves(axes[0][0], by_parts, "partitions", "records_per_s", label),
        _curves(axes[0][1], by_parts, "partitions", "commit_p50_ms", lambda r: f"{label(r)} p50"),
        _curves(axes[1][0], by_batch, "per_batch", "records_per_s", label),
        _curves(axes[1][1], by_batch, "per_batch", "commit_p50_ms", lambda r: f"{label(r)} p50"),
    ]
    _curves(axes[0][1], by_parts, "partitions", "commit_p99_ms", lambda r: f"{label(r)} p99")
    _curves(axes[1][1], by_batch, "per_batch", "commit_p99_ms", lambda r: f"{label(r)} p99")
    for ax, xl, yl in ((axes[0][0], "Kafka partitions (= tasks)", "records/s (1 KiB records)"),
                       (axes[0][1], "Kafka partitions (= transactions per commit)", "driver commit ms"),
                       (axes[1][0], "records per micro-batch (pipeline)", "records/s (1 KiB records)"),
                       (axes[1][1], "records per micro-batch (pipeline)", "driver commit ms")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
    if any(drawn):
        written.append(_save(plt, fig, out / "scaling.png"))
    else:
        plt.close(fig)
    return written


def _spark(jars: str, baseline_rev: str | None = None, confs: dict[str, str] | None = None):
    import kafka_eos_ds
    from kafka_eos_tools.spark_session import spark_builder

    builder = (spark_builder("kafka-eos-bench", jars).config("spark.driver.memory", "2g")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in (confs or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafka_eos_ds.register(spark)
    formats.register(spark, baseline_rev)
    return spark


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="smoke")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--brokers", type=int, default=1, help="embedded cluster size")
    parser.add_argument("--only", default="",
                        help="comma-separated workloads (source, sink, pipeline) or variant substrings (default: all)")
    parser.add_argument("--sizes", help="comma-separated record sizes (override the profile's)")
    parser.add_argument("--partitions", type=int, help="partitions of the main matrix (override)")
    parser.add_argument("--reps", type=int, help="measured runs per variant (override)")
    parser.add_argument("--mb", type=float, help="megabytes of values per run (override)")
    parser.add_argument("--no-scaling", action="store_true", help="only the main matrix")
    parser.add_argument("--baseline-read", metavar="REV",
                        help="also read with kafka_eos_ds/source/reading.py as of git revision REV")
    parser.add_argument("--out", default=None,
                        help="output directory (default: a temp dir for smoke, docs/bench for full)")
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.sizes:
        profile = replace(profile, sizes=tuple(int(s) for s in args.sizes.split(",")))
    if args.partitions:
        profile = replace(profile, partitions=args.partitions)
    if args.reps:
        profile = replace(profile, reps=args.reps)
    if args.mb:
        profile = replace(profile, bytes_per_run=int(args.mb * 1e6))
    only = tuple(filter(None, args.only.split(",")))
    out = Path(args.out or ("bench/results" if args.profile == "full" else tempfile.mkdtemp(prefix="bench-")))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    def log(s):
        return print(s, flush=True)
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

    jars, connector = builtin_kafka_jars()
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        from kafka_eos_tools.broker.cluster import EmbeddedKafka

        cluster = EmbeddedKafka(tempfile.mkdtemp(prefix="bench-kafka-"), brokers=args.brokers)
        bootstrap = cluster.start()
    import pyspark

    started = time.monotonic()
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
               "builtin_connector": connector, "kafka": "embedded" if cluster else f"at {bootstrap}",
               "date": time.strftime("%Y-%m-%d"), "profile": args.profile, "reps": profile.reps,
               "elapsed_min": 0.0, "profile_settings": asdict(profile)}

    def report(final: bool) -> list[Path]:
        """Write JSON and Markdown (after every configuration, so a broken run keeps what it
        measured); charts at the end."""
        machine["elapsed_min"] = (time.monotonic() - started) / 60
        rows, failed = ratios(results), failures(results)
        (out / "results.json").write_text(json.dumps({"machine": machine, "results": rows, "failures": failed},
                                                     indent=2))
        (out / "results.md").write_text(markdown(rows, machine, failed))
        return charts(rows, out, profile) if final and rows else []

    spark = _spark(jars, args.baseline_read)
    results: list[Measurement] = []
    try:
        runner = Runner(spark, bootstrap, profile, min(args.brokers, 3), log, only, bool(args.baseline_read))
        def variants_of(c):
            return list(runner.variants(c))
        configs = [c for c in plan(profile, not args.no_scaling) if variants_of(c)]
        planned = estimate_s(configs, profile, variants_of, profile.warmup)
        log(f"{len(configs)} configurations, {sum(len(variants_of(c)) for c in configs) * profile.reps} measured "
            f"runs; estimate ~{planned / 60:.0f} min on 2 shared cores")
        if profile.warmup:
            runner.warm_up()
        for i, c in enumerate(configs):
            results.extend(runner.measure(c))
            report(final=False)
            done = time.monotonic() - started
            left = estimate_s(configs[i + 1:], profile, variants_of) * done / max(
                estimate_s(configs[:i + 1], profile, variants_of), 1)
            log(f"-- {i + 1}/{len(configs)} configurations, {done / 60:.1f} min elapsed, ~{left / 60:.0f} min left")
    finally:
        spark.stop()
        if cluster is not None:
            cluster.stop()
    written = report(final=True)
    print((out / "results.md").read_text())
    print("wrote", out / "results.json", out / "results.md", *written)
    return 1 if failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
