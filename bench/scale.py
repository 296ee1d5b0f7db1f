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
from kafka_eos_tools.topics import create_topic, produce

EOS, BUILTIN, ALO = "kafka_eos exactly_once", "builtin", "kafka_eos at_least_once"
# The goal settings also run what the misses are measured against: the sink's own
# at-least-once mode on the same data, and each source into a Python sink that writes
# nothing (bench.run's floors).
GOAL_EXTRAS = (ALO, FLOOR_EOS, FLOOR_BUILTIN)
# ``--plans``: issue 37's table, the plan by work against the built-in's plan on both sides.
EOS_GROUPED, ALO_GROUPED, BUILTIN_COALESCE = ("kafka_eos exactly_once grouped", "kafka_eos at_least_once grouped",
                                              "builtin coalesce")
PLAN_VARIANTS = (EOS, EOS_GROUPED, ALO_GROUPED, BUILTIN, BUILTIN_COALESCE)
# Issue 37's goals: exactly-once grouped / built-in pipeline (records/s) per partition count.
PLAN_GOALS = {4: 0.8, 16: 1.0, 64: 1.5, 256: 2.0}


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


def plan_variants(partitions: int, per_partition_up_to: int | None) -> tuple[str, ...]:
    """The --plans variants of a setting: kafka_eos with one task per Kafka partition only
    up to ``per_partition_up_to`` partitions (at 1,000 a run takes ~6 minutes, and the
    curve of ``bench.scale`` already measures that plan's cost per partition)."""
    if per_partition_up_to is not None and partitions > per_partition_up_to:
        return tuple(v for v in PLAN_VARIANTS if v != EOS)
    return PLAN_VARIANTS


def plan_settings(partitions: list[int], batches: int) -> list[Setting]:
    """Issue 37's settings: 4 x 1 KiB (100 MB), the others 200,000 x 100 B."""
    return [Setting("plans", p, 1024 if p == 4 else 100, 97_656 if p == 4 else 200_000, batches) for p in partitions]


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


def run_once(spark, bootstrap: str, s: Setting, variant: str, in_topic: str, target: int = 2,
             extra_source_options: dict | None = None) -> Run:
    """One pipeline run; ``target`` is the grouped variants' task count (``targetPartitions``
    of the kafka_eos source, ``.coalesce`` of the built-in's); ``extra_source_options`` go
    to every kafka_eos source (an A/B of one option against the same built-in runs)."""
    from kafka_eos_tools.audit import audit

    out_topic = create_topic(bootstrap, f"scale-out-{uuid.uuid4().hex[:8]}", s.partitions)
    time.sleep(2 if s.partitions < 256 else 10)  # the broker finishes creating the partitions' logs
    per_batch = -(-s.records // s.batches)
    commits = formats.CommitLog() if variant in (EOS, EOS_GROUPED) else None
    load = os.getloadavg()[0]
    fmt, source, guarantee = {EOS: (formats.TIMED, None, "exactly_once"), BUILTIN: (w.BUILTIN, None, ""),
                              ALO: (w.EOS, None, "at_least_once"), FLOOR_EOS: (formats.NOOP, w.EOS, ""),
                              FLOOR_BUILTIN: (formats.NOOP, w.BUILTIN, ""),
                              EOS_GROUPED: (formats.TIMED, None, "exactly_once"),
                              ALO_GROUPED: (w.EOS, None, "at_least_once"),
                              BUILTIN_COALESCE: (w.BUILTIN, None, "")}[variant]
    grouped = variant in (EOS_GROUPED, ALO_GROUPED)
    plan = ({"partitionPlan": "grouped", "targetPartitions": target} if grouped
            else {"partitionPlan": "perKafkaPartition"} if s.kind == "plans" and fmt != w.BUILTIN else None)
    if extra_source_options and fmt != w.BUILTIN and source is None:
        plan = {**(plan or {}), **extra_source_options}
    timing = w.pipeline(spark, fmt, bootstrap, in_topic, out_topic, per_batch, commits, source=source,
                        guarantee=guarantee or "exactly_once", source_options=plan,
                        coalesce=target if variant == BUILTIN_COALESCE else None)
    run = Run(variant, timing.seconds, load=load,
              batch_s=[ms / 1000 for ms in (timing.batch_ms or {}).get("triggerExecution", [])])
    if commits:
        commits.add_to(run)
    if fmt != w.BUILTIN and source is None:  # every kafka_eos pipeline run is audited
        report = audit({"bootstrap.servers": bootstrap}, in_topic, out_topic, timeout=600)
        run.records_out, run.duplicates, run.losses = report.records_out, report.duplicates, report.losses
        if not report.ok:
            run.failure = f"audit: {report.to_json()}"
    elif variant in (BUILTIN, BUILTIN_COALESCE):
        run.records_out = _count(bootstrap, out_topic)
        if run.records_out < s.records:
            run.failure = f"read {run.records_out:,} of {s.records:,} records"
    return run


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _driver_and_tasks(mine: list[Run], partitions: int) -> dict:
    """A timed exactly-once variant's driver and task figures over its runs."""
    commit = [c for r in mine for c in r.commit_s]
    later = [c for r in mine for c in r.commit_s[1:]]  # a query's first commit is its slowest (measured)
    prepare = [c for r in mine for c in r.prepare_s]
    own = [t - i for r in mine for t, i in zip(r.task_s, r.task_input_s, strict=True)]
    walls = [t for r in mine for t in r.task_s]
    ms = 1000
    return {
        "commit_p50_ms": (percentile(commit, 0.5) or 0) * ms, "commit_p99_ms": (percentile(commit, 0.99) or 0) * ms,
        "commit_p99_after_first_ms": (percentile(later, 0.99) or 0) * ms,
        "prepare_p50_ms": (percentile(prepare, 0.5) or 0) * ms,
        "driver_per_partition_ms": ((_median(prepare) or 0) + (_median(commit) or 0)) * ms / partitions,
        "task_own_p50_ms": (_median(own) or 0) * ms, "task_wall_p50_ms": (_median(walls) or 0) * ms,
        "tasks": len(walls),
        "driver_per_batch_ms": ((_median(prepare) or 0) + (_median(commit) or 0)) * ms}


def summarize(s: Setting, runs: list[Run]) -> dict:
    ok = {v: [r for r in runs if r.variant == v and not r.failure] for v in dict.fromkeys(r.variant for r in runs)}
    ok.setdefault(EOS, [])
    ok.setdefault(BUILTIN, [])
    row: dict = {**asdict(s), "failures": [f"{r.variant}: {r.failure[:500]}" for r in runs if r.failure],
                 "loads": [round(r.load, 1) for r in runs]}
    for v, mine in ok.items():
        row[v] = {"seconds": [round(r.seconds, 2) for r in mine], "median_s": _median([r.seconds for r in mine]),
                  "batch_per_partition_ms": (_median([b for r in mine for b in r.batch_s]) or 0) * 1000 / s.partitions,
                  "batch_ms": (_median([b for r in mine for b in r.batch_s]) or 0) * 1000,
                  "batches_seen": sum(len(r.batch_s) for r in mine),
                  "records_out": [r.records_out for r in mine], "duplicates": sum(r.duplicates for r in mine),
                  "losses": sum(r.losses for r in mine)}
    eos, builtin = row[EOS], row[BUILTIN]
    row["ratio"] = (builtin["median_s"] / eos["median_s"]) if eos["median_s"] and builtin["median_s"] else None
    # Every variant against the built-in pipeline (records/s ratio), and exactly-once against at-least-once.
    row["ratios"] = {v: builtin["median_s"] / row[v]["median_s"] for v in ok
                     if row[v]["median_s"] and builtin["median_s"]}
    if ok.get(ALO) and eos["median_s"]:
        row["eos_vs_alo"] = row[ALO]["median_s"] / eos["median_s"]
    for v in (EOS, EOS_GROUPED):
        if v in row:
            row[v].update(_driver_and_tasks(ok[v], s.partitions))
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


def _limit(e: dict) -> str:
    """Where a grouped exactly-once batch spends its time: the driver's steps, the tasks'
    own work (summed over the batch's tasks), the rest of Spark's batch time."""
    batch = e.get("batch_ms") or 0
    tasks = e.get("task_own_p50_ms", 0) * e.get("tasks", 0) / max(e.get("batches_seen", 0), 1)
    parts = {"driver steps": e.get("driver_per_batch_ms", 0), "task work": tasks}
    parts["Spark batch time"] = max(batch - sum(parts.values()), 0)
    name = max(parts, key=lambda k: parts[k])
    return f"{name} ({', '.join(f'{k} {v:,.0f}' for k, v in parts.items())} of {batch:,.0f} ms a batch)"


def plans_markdown(rows: list[dict], machine: dict) -> str:
    """Issue 37's table: median s per variant (records/s ratio to the built-in) and the goals."""
    def f(v, spec=".1f"):
        return "" if v is None else format(v, spec)

    lines = [f"Issue 37: the pipeline, {machine['batches']} micro-batches, `local[2]`, pyspark {machine['pyspark']}, "
             f"{machine['date']}, median of {machine['reps']} alternating run(s) per variant, grouped = "
             f"{machine['target']} tasks; every kafka_eos run audited.", "",
             "| partitions | record | records | " + " | ".join(PLAN_VARIANTS)
             + " | eos grouped commit p50 / p99 ms | audited out / dup / lost (eos grouped) | load |",
             "|---:|---:|---:|" + "---:|" * len(PLAN_VARIANTS) + "---|---|---|"]
    goals = []
    for r in rows:
        cell = [f"{f(r[v]['median_s'])} ({f(r['ratios'].get(v), '.2f')}x)" if v in r else "" for v in PLAN_VARIANTS]
        g = r.get(EOS_GROUPED, {})
        lines.append(f"| {r['partitions']:,} | {r['size']} B | {r['records']:,} | " + " | ".join(cell)
                     + f" | {f(g.get('commit_p50_ms'), ',.0f')} / {f(g.get('commit_p99_ms'), ',.0f')} | "
                     f"{'/'.join(format(n, ',') for n in g.get('records_out', []))} / {g.get('duplicates', '')} / "
                     f"{g.get('losses', '')} | {', '.join(str(x) for x in r['loads'])} |")
        ratio, want = r["ratios"].get(EOS_GROUPED), PLAN_GOALS.get(r["partitions"])
        if want is not None:
            goals.append((f"pipeline >= {want}x the built-in at {r['partitions']:,} partitions",
                          f"{f(ratio, '.2f')}x", ratio is not None and ratio >= want, g))
        alo = r.get(ALO_GROUPED, {}).get("median_s")
        if alo and g.get("median_s"):
            goals.append((f"exactly-once within 10% of at_least_once at {r['partitions']:,}",
                          f"{g['median_s'] / alo:.2f}x the time", g["median_s"] <= 1.1 * alo, g))
        if r["partitions"] == 1000:
            p99 = g.get("commit_p99_ms")
            goals.append(("1,000 partitions exactly once, commit p99 < 1 s", f"{f(p99, ',.0f')} ms",
                          p99 is not None and 0 < p99 < 1000, g))
    lines += ["", "| goal | measured | | limited by (grouped exactly-once, medians) |", "|---|---:|---|---|"]
    lines += [f"| {name} | {got} | {'met' if met else '**missed**'} | {'' if met else _limit(g)} |"
              for name, got, met, g in goals]
    failed = [x for r in rows for x in r["failures"]]
    return "\n".join(lines + [""] + [f"FAILED: {x}" for x in failed]) + "\n"


def plans_plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for v in PLAN_VARIANTS:
        pts = [(r["partitions"], r["records"] / r[v]["median_s"]) for r in rows if r.get(v, {}).get("median_s")]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=v)
    ax.set(xscale="log", xlabel="partitions", ylabel="records/s (median)", title="pipeline by plan")
    ax.legend()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def measure_all(spark, bootstrap: str, plan: list[Setting], args, rows: list[dict], report) -> None:
    """Every setting's runs, alternated; ``report()`` after each setting (a long run that
    breaks keeps what it measured)."""
    started = time.monotonic()
    # One small run of each variant first: JIT, class loading, Python workers.
    warm = Setting("warm-up", 4, 100, 2_000, 2)
    warm_topic = _seed(bootstrap, warm)
    plans = any(s.kind == "plans" for s in plan)
    for variant in (PLAN_VARIANTS if plans else
                    (EOS, BUILTIN, *(GOAL_EXTRAS if any(s.kind == "goal" for s in plan) else ()))):
        if not args.variants or variant in args.variants:
            run_once(spark, bootstrap, warm, variant, warm_topic, args.target_partitions, args.source_options)
    for s in plan:
        topic = _seed(bootstrap, s)
        runs: list[Run] = []
        setting_started = time.monotonic()
        for rep in range(args.curve_reps if s.kind == "curve" else args.reps):
            order = (plan_variants(s.partitions, args.per_partition_up_to) if s.kind == "plans"
                     else (EOS, BUILTIN, *(GOAL_EXTRAS if s.kind == "goal" else ())))
            if args.variants:
                order = tuple(v for v in order if v in args.variants)
            for variant in (order if rep % 2 == 0 else order[::-1]):
                try:
                    runs.append(run_once(spark, bootstrap, s, variant, topic, args.target_partitions,
                                         args.source_options))
                except Exception as exc:  # one failed run must not lose a long run's results
                    runs.append(Run(variant, 0.0, failure=f"{type(exc).__name__}: {str(exc)[:300]}"))
                r = runs[-1]
                print(f"{s.kind:<5} {s.partitions:>5} x {s.size:>5} B {s.records:>9,} rec {variant:<24} "
                      f"{r.seconds:7.1f}s out {r.records_out:,} dup {r.duplicates} lost {r.losses} "
                      f"load {r.load:.1f} {r.failure[:200]}", flush=True)
        rows.append(summarize(s, runs))
        print(f"-- {len(rows)}/{len(plan)} settings, this one {(time.monotonic() - setting_started) / 60:.1f} min, "
              f"{(time.monotonic() - started) / 60:.1f} min in all", flush=True)
        report()


def report(out: Path, machine: dict, rows: list[dict]) -> None:
    (out / "scale.json").write_text(json.dumps({"machine": machine, "results": rows}, indent=2))
    if machine.get("plans"):
        (out / "results.md").write_text(plans_markdown(rows, machine))
        (out / "scale.md").write_text(plans_markdown(rows, machine))
        if rows:
            plans_plot(rows, out / "plans.png")
    else:
        (out / "scale.md").write_text(markdown(rows, machine))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale")
    parser.add_argument("--curve", default="4,16,64,256,1000", help="partition counts of the per-partition curve")
    parser.add_argument("--per-partition", type=int, default=200, help="records of 100 B per partition (curve)")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--reps", type=int, default=2, help="runs per variant of the goal settings, alternated")
    parser.add_argument("--curve-reps", type=int, default=1, help="runs per variant of the curve's settings")
    parser.add_argument("--no-goals", action="store_true", help="only the curve")
    parser.add_argument("--plans", action="store_true",
                        help="issue 37's table: 4 x 1 KiB, 16/64/256/1,000 x 100 B, five variants, 3 reps")
    parser.add_argument("--quick", action="store_true", help="with --plans: 4 and 64 partitions only")
    parser.add_argument("--plan-partitions", help="with --plans: override the partition counts (e.g. 4)")
    parser.add_argument("--records", type=int, help="with --plans: override the records per setting")
    parser.add_argument("--per-partition-up-to", type=int,
                        help="with --plans: kafka_eos with one task per partition only up to this many partitions")
    parser.add_argument("--target-partitions", type=int, default=0,
                        help="tasks of the grouped variants (default: the session's defaultParallelism)")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--out", help="output directory (default: a temp dir)")
    parser.add_argument("--variants", help="only these variants, comma-separated (e.g. 'builtin,kafka_eos "
                        "exactly_once grouped')")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of every kafka_eos source (repeatable), e.g. commitOffsetsToGroup=false")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the session (repeatable), e.g. "
                        "spark.python.unix.domain.socket.enabled=true")
    args = parser.parse_args(argv)
    args.variants = {v.strip() for v in args.variants.split(",")} if args.variants else set()
    args.source_options = dict(kv.split("=", 1) for kv in args.source_option)
    confs = dict(kv.split("=", 1) for kv in args.spark_conf)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark

    from bench.run import _spark
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

    if args.plans:
        counts = args.plan_partitions or ("4,64" if args.quick else "4,16,64,256,1000")
        plan = plan_settings([int(p) for p in counts.split(",")], args.batches)
        if args.records:
            plan = [Setting(s.kind, s.partitions, s.size, args.records, s.batches) for s in plan]
        if args.reps == 2:  # the goal settings' default; issue 37 asks for medians of 3
            args.reps = 3
    else:
        plan = settings([int(p) for p in args.curve.split(",") if p], args.per_partition, args.batches,
                        not args.no_goals)
    jars, connector = builtin_kafka_jars()
    rows: list[dict] = []
    with bench_kafka(args.bootstrap) as (bootstrap, kafka):
        machine = {"date": time.strftime("%Y-%m-%d"), "pyspark": pyspark.__version__, "builtin_connector": connector,
                   "cpus": os.cpu_count(), "batches": args.batches, "reps": args.reps,
                   "curve_reps": args.curve_reps, "kafka": kafka, "command": " ".join(sys.argv),
                   "plans": args.plans, "source_options": args.source_options, "spark_conf": confs}
        spark = _spark(jars, confs=confs)
        args.target_partitions = args.target_partitions or spark.sparkContext.defaultParallelism
        machine["target"] = args.target_partitions
        try:
            measure_all(spark, bootstrap, plan, args, rows, lambda: report(out, machine, rows))
        finally:
            spark.stop()
    print((out / "scale.md").read_text())
    if args.plans:
        print("wrote", out / "results.md", out / "plans.png")
    print("wrote", out / "scale.json", out / "scale.md")
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
