"""The pipeline from 4 to 1,000 partitions: throughput against the built-in, the driver's
commit latency, the cost per partition per batch, and an exactly-once audit of every run.

    python -m bench.scale [--curve 4,16,64,256,1000] [--per-partition 200] [--batches 10]
                          [--reps 2] [--curve-reps 1] [--no-goals] [--bootstrap host:9092] [--out bench/results/scale]

Two kinds of configuration, each a Kafka -> Spark -> Kafka pipeline (``AvailableNow``,
``maxOffsetsPerTrigger`` = records / batches) run by the kafka_eos source into the
kafka_eos exactly-once sink (as ``kafka_eos_timed``: its planner check, each task's write
and the driver's commit timed, bench.formats) and by the built-in source into the built-in
sink (at least once), alternated A B, B A:

* **goals**: the issue's two throughput settings, 4 partitions of 1 KiB records (100 MB)
  and 64 partitions of 100 B (200,000 records);
* **curve**: ``--per-partition`` records of 100 B per partition (20 per partition and
  batch at the defaults), so every point moves the same data per task and what grows is
  the number of partitions: the per-partition cost is the slope.

Every input value is ``<id>|xxx...``, so each kafka_eos run is audited
(kafka_eos_tools.audit: records in and out, duplicates, losses, order per key); a run
that does not audit clean is a failed run (left out of the medians, exit 1). The
built-in's output is counted, not audited: at least once makes no promise to check.

Cost per partition per batch (exactly-once, medians over the batches):

* driver: (planner check + driver commit) / partitions;
* tasks: each task is one partition: its write minus the time it waited for input rows
  (the source's read and Spark's hand-over), i.e. what the sink itself spends per
  partition; ``task wall`` adds the wait back;
* batch: Spark's ``triggerExecution`` of a micro-batch / partitions, for both variants.

Writes ``scale.json`` and ``scale.md`` to ``--out`` after every configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import formats
from bench import workloads as w
from bench.cluster import bench_kafka
from bench.run import FLOOR_BUILTIN, FLOOR_EOS, percentile
from integration.helpers import create_topic, produce

EOS, BUILTIN, ALO = "kafka_eos exactly_once", "builtin", "kafka_eos at_least_once"
# The goal settings also run what the misses are measured against: the sink's own
# at-least-once mode on the same data, and each source into a Python sink that writes
# nothing (bench.run's floors).
GOAL_EXTRAS = (ALO, FLOOR_EOS, FLOOR_BUILTIN)


@dataclass(frozen=True)
class Setting:
    kind: str  # "goal" or "curve"
    partitions: int
    size: int
    records: int
    batches: int


@dataclass
class Run:
    variant: str
    seconds: float
    batch_s: list = field(default_factory=list)     # Spark's triggerExecution per micro-batch with input
    prepare_s: list = field(default_factory=list)
    commit_s: list = field(default_factory=list)
    task_s: list = field(default_factory=list)
    task_input_s: list = field(default_factory=list)
    records_out: int = 0
    duplicates: int = 0
    losses: int = 0
    failure: str = ""
    load: float = 0.0


def settings(curve: list[int], per_partition: int, batches: int, goals: bool) -> list[Setting]:
    out = [Setting("goal", 4, 1024, 97_656, batches), Setting("goal", 64, 100, 200_000, batches)] if goals else []
    return out + [Setting("curve", p, 100, p * per_partition, batches) for p in curve]


def _seed(bootstrap: str, s: Setting) -> str:
    topic = create_topic(bootstrap, f"scale-in-{s.partitions}-{uuid.uuid4().hex[:6]}", s.partitions)
    pad = b"x" * s.size

    def records():
        for i in range(s.records):
            head = f"{i}|".encode()
            yield {"key": str(i % 1000).encode(), "value": head + pad[len(head):]}

    produce(bootstrap, topic, records(), **{"batch.size": 1_000_000, "linger.ms": 20})
    return topic


def _count(bootstrap: str, topic: str) -> int:
    from kafka_eos_tools.audit import read_topic

    return sum(1 for _ in read_topic({"bootstrap.servers": bootstrap}, topic, lambda m: None, timeout=300))


def run_once(spark, bootstrap: str, s: Setting, variant: str, in_topic: str) -> Run:
    from kafka_eos_tools.audit import audit

    out_topic = create_topic(bootstrap, f"scale-out-{uuid.uuid4().hex[:8]}", s.partitions)
    time.sleep(2 if s.partitions < 256 else 10)  # the broker finishes creating the partitions' logs
    per_batch = -(-s.records // s.batches)
    commits = formats.CommitLog() if variant == EOS else None
    load = os.getloadavg()[0]
    fmt, source, guarantee = {EOS: (formats.TIMED, None, "exactly_once"), BUILTIN: (w.BUILTIN, None, ""),
                              ALO: (w.EOS, None, "at_least_once"), FLOOR_EOS: (formats.NOOP, w.EOS, ""),
                              FLOOR_BUILTIN: (formats.NOOP, w.BUILTIN, "")}[variant]
    timing = w.pipeline(spark, fmt, bootstrap, in_topic, out_topic, per_batch, commits, source=source,
                        guarantee=guarantee or "exactly_once")
    run = Run(variant, timing.seconds, load=load,
              batch_s=[ms / 1000 for ms in (timing.batch_ms or {}).get("triggerExecution", [])])
    if commits:
        commits.add_to(run)
        report = audit({"bootstrap.servers": bootstrap}, in_topic, out_topic, timeout=600)
        run.records_out, run.duplicates, run.losses = report.records_out, report.duplicates, report.losses
        if not report.ok:
            run.failure = f"audit: {report.to_json()}"
    elif variant in (BUILTIN, ALO):
        run.records_out = _count(bootstrap, out_topic)
        if run.records_out < s.records:
            run.failure = f"read {run.records_out:,} of {s.records:,} records"
    return run


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(s: Setting, runs: list[Run]) -> dict:
    ok = {v: [r for r in runs if r.variant == v and not r.failure] for v in dict.fromkeys(r.variant for r in runs)}
    ok.setdefault(EOS, [])
    ok.setdefault(BUILTIN, [])
    row: dict = {**asdict(s), "failures": [f"{r.variant}: {r.failure[:500]}" for r in runs if r.failure],
                 "loads": [round(r.load, 1) for r in runs]}
    for v, mine in ok.items():
        row[v] = {"seconds": [round(r.seconds, 2) for r in mine], "median_s": _median([r.seconds for r in mine]),
                  "batch_per_partition_ms": (_median([b for r in mine for b in r.batch_s]) or 0) * 1000 / s.partitions,
                  "records_out": [r.records_out for r in mine], "duplicates": sum(r.duplicates for r in mine),
                  "losses": sum(r.losses for r in mine)}
    eos, builtin = row[EOS], row[BUILTIN]
    row["ratio"] = (builtin["median_s"] / eos["median_s"]) if eos["median_s"] and builtin["median_s"] else None
    # Every variant against the built-in pipeline (records/s ratio), and exactly-once against at-least-once.
    row["ratios"] = {v: builtin["median_s"] / row[v]["median_s"] for v in ok
                     if row[v]["median_s"] and builtin["median_s"]}
    if ok.get(ALO) and eos["median_s"]:
        row["eos_vs_alo"] = row[ALO]["median_s"] / eos["median_s"]
    mine = ok[EOS]
    commit = [c for r in mine for c in r.commit_s]
    later = [c for r in mine for c in r.commit_s[1:]]  # a query's first commit is its slowest (measured)
    prepare = [c for r in mine for c in r.prepare_s]
    own = [t - i for r in mine for t, i in zip(r.task_s, r.task_input_s, strict=True)]
    walls = [t for r in mine for t in r.task_s]
    ms = 1000
    eos.update({
        "commit_p50_ms": (percentile(commit, 0.5) or 0) * ms, "commit_p99_ms": (percentile(commit, 0.99) or 0) * ms,
        "commit_p99_after_first_ms": (percentile(later, 0.99) or 0) * ms,
        "prepare_p50_ms": (percentile(prepare, 0.5) or 0) * ms,
        "driver_per_partition_ms": ((_median(prepare) or 0) + (_median(commit) or 0)) * ms / s.partitions,
        "task_own_p50_ms": (_median(own) or 0) * ms, "task_wall_p50_ms": (_median(walls) or 0) * ms,
        "tasks": len(walls)})
    return row


def markdown(rows: list[dict], machine: dict) -> str:
    def f(v, spec=",.0f"):
        return "" if v is None else format(v, spec)

    lines = [f"Pipeline Kafka -> Spark -> Kafka, kafka_eos exactly-once against the built-in (at least once), "
             f"{machine['batches']} micro-batches, `local[2]`, pyspark {machine['pyspark']}, {machine['date']}, "
             f"{machine['reps']} run(s) per variant of a goal setting, {machine['curve_reps']} of a curve setting; "
             "every kafka_eos run audited.", "",
             "| setting | partitions | record | records | kafka_eos s | built-in s | ratio | audited out / dup / lost "
             "| commit p50 / p99 ms (p99 after the first) | planner p50 ms | driver ms / partition / batch "
             "| task own / wall p50 ms | batch ms / partition (eos / built-in) | load |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|---|"]
    for r in rows:
        e, b = r[EOS], r[BUILTIN]
        lines.append(
            f"| {r['kind']} | {r['partitions']:,} | {r['size']} B | {r['records']:,} | {f(e['median_s'], '.1f')} | "
            f"{f(b['median_s'], '.1f')} | {f(r['ratio'], '.2f')}x | "
            f"{'/'.join(f(n) for n in e['records_out'])} / {e['duplicates']} / {e['losses']} | "
            f"{f(e['commit_p50_ms'])} / {f(e['commit_p99_ms'])} ({f(e['commit_p99_after_first_ms'])}) | "
            f"{f(e['prepare_p50_ms'])} | {f(e['driver_per_partition_ms'], '.2f')} | "
            f"{f(e['task_own_p50_ms'], '.1f')} / {f(e['task_wall_p50_ms'], '.1f')} | "
            f"{f(e['batch_per_partition_ms'], '.1f')} / {f(b['batch_per_partition_ms'], '.1f')} | "
            f"{', '.join(str(x) for x in r['loads'])} |")
    extras = [r for r in rows if len(r["ratios"]) > 2]
    if extras:
        lines += ["", "Every variant of the goal settings, median s (records/s ratio to the built-in pipeline):", "",
                  "| partitions | record | " + " | ".join(r for r in extras[0]["ratios"]) + " | exactly-once / "
                  "at-least-once |", "|---:|---:|" + "---:|" * (len(extras[0]["ratios"]) + 1)]
        for r in extras:
            lines.append(f"| {r['partitions']:,} | {r['size']} B | "
                         + " | ".join(f"{f(r[v]['median_s'], '.1f')} ({f(x, '.2f')}x)" for v, x in r["ratios"].items())
                         + f" | {f(r.get('eos_vs_alo'), '.2f')}x |")
    failed = [x for r in rows for x in r["failures"]]
    return "\n".join(lines + [""] + [f"FAILED: {x}" for x in failed]) + "\n"


def measure_all(spark, bootstrap: str, plan: list[Setting], args, rows: list[dict], report) -> None:
    """Every setting's runs, alternated; ``report()`` after each setting (a long run that
    breaks keeps what it measured)."""
    started = time.monotonic()
    # One small run of each variant first: JIT, class loading, Python workers.
    warm = Setting("warm-up", 4, 100, 2_000, 2)
    warm_topic = _seed(bootstrap, warm)
    for variant in (EOS, BUILTIN, *(GOAL_EXTRAS if any(s.kind == "goal" for s in plan) else ())):
        run_once(spark, bootstrap, warm, variant, warm_topic)
    for s in plan:
        topic = _seed(bootstrap, s)
        runs: list[Run] = []
        for rep in range(args.reps if s.kind == "goal" else args.curve_reps):
            order = (EOS, BUILTIN, *(GOAL_EXTRAS if s.kind == "goal" else ()))
            for variant in (order if rep % 2 == 0 else order[::-1]):
                try:
                    runs.append(run_once(spark, bootstrap, s, variant, topic))
                except Exception as exc:  # one failed run must not lose a long run's results
                    runs.append(Run(variant, 0.0, failure=f"{type(exc).__name__}: {str(exc)[:300]}"))
                r = runs[-1]
                print(f"{s.kind:<5} {s.partitions:>5} x {s.size:>5} B {s.records:>9,} rec {variant:<24} "
                      f"{r.seconds:7.1f}s out {r.records_out:,} dup {r.duplicates} lost {r.losses} "
                      f"load {r.load:.1f} {r.failure[:200]}", flush=True)
        rows.append(summarize(s, runs))
        print(f"-- {len(rows)}/{len(plan)} settings, {(time.monotonic() - started) / 60:.1f} min", flush=True)
        report()


def report(out: Path, machine: dict, rows: list[dict]) -> None:
    (out / "scale.json").write_text(json.dumps({"machine": machine, "results": rows}, indent=2))
    (out / "scale.md").write_text(markdown(rows, machine))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--curve", default="4,16,64,256,1000", help="partition counts of the per-partition curve")
    parser.add_argument("--per-partition", type=int, default=200, help="records of 100 B per partition (curve)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--reps", type=int, default=2, help="runs per variant of the goal settings, alternated")
    parser.add_argument("--curve-reps", type=int, default=1, help="runs per variant of the curve's settings")
    parser.add_argument("--no-goals", action="store_true", help="only the curve")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--out", help="output directory (default: a temp dir)")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark

    from bench.run import _spark
    from integration.builtin_kafka import builtin_kafka_jars

    plan = settings([int(p) for p in args.curve.split(",") if p], args.per_partition, args.batches,
                    not args.no_goals)
    jars, connector = builtin_kafka_jars()
    rows: list[dict] = []
    with bench_kafka(args.bootstrap) as (bootstrap, kafka):
        machine = {"date": time.strftime("%Y-%m-%d"), "pyspark": pyspark.__version__, "builtin_connector": connector,
                   "cpus": os.cpu_count(), "batches": args.batches, "reps": args.reps,
                   "curve_reps": args.curve_reps, "kafka": kafka, "command": " ".join(sys.argv)}
        spark = _spark(jars)
        try:
            measure_all(spark, bootstrap, plan, args, rows, lambda: report(out, machine, rows))
        finally:
            spark.stop()
    print((out / "scale.md").read_text())
    print("wrote", out / "scale.json", out / "scale.md")
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
