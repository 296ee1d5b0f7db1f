"""The first query in a fresh SparkSession: what a user waits from building the session
to the end of their first streaming query.

    python -m bench.first_query [--reps 3] [--records 20000] [--partitions 4] [--size 1024]
                                [--bootstrap host:9092] [--out DIR]

Every run is a fresh Python process (so a fresh JVM: nothing loaded, compiled or cached)
that builds the SparkSession with the built-in connector's jars and kafka_eos registered,
then runs Kafka -> Spark -> Kafka once with AvailableNow in two micro-batches of the same
seeded topic into a fresh output topic, created beforehand so the broker's work is not
timed: the kafka_eos source into the kafka_eos exactly-once sink, or the built-in source
into the built-in (at-least-once) sink. Timed from the process's first import:
``session_s`` (imports, getOrCreate, registration), ``query_s`` (the query's start to its
end; ``in_batches_s`` of it in Spark's micro-batches, the rest is the query's start) and
``total_s`` (both). A run whose output topic does not hold every input record for a
read_committed consumer failed. Variants alternate A B, B A, ...; the goal (kafka_eos's
first query within 1.5x of the built-in's) is judged on the median ``total_s``.

Writes ``first_query.json`` and ``first_query.md`` to ``--out`` (default: a temp directory).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

_STARTED = time.perf_counter()  # a child's clock: before pyspark, kafka_eos or the bench load

GOAL = 1.5  # kafka_eos's first query at most this many times the built-in's (total_s)
FIGURES = ("total_s", "session_s", "query_s", "in_batches_s")
ROOT = Path(__file__).resolve().parent.parent


def child(spec: dict) -> dict:
    """One run in this fresh process. The bench's modules import pyspark: imported here,
    inside the clock, as a user's job imports it."""
    from bench import formats
    from bench import workloads as w
    from bench.run import _spark
    from kafka_eos_tools.topics import consume_all

    spark = _spark(spec["jars"])
    session_s = time.perf_counter() - _STARTED
    # kafka_eos's sink as kafka_eos_timed (the same writers): where its first batch goes.
    commits = formats.CommitLog() if spec["fmt"] == w.EOS else None
    try:
        timing = w.pipeline(spark, formats.TIMED if commits else spec["fmt"], spec["bootstrap"], spec["topic"],
                            spec["out_topic"], spec["records"] // 2, commits)
        total_s = time.perf_counter() - _STARTED
    finally:
        spark.stop()
    out = consume_all(spec["bootstrap"], spec["out_topic"], timeout=120)
    return {"session_s": session_s, "query_s": timing.seconds, "in_batches_s": timing.in_batches,
            "total_s": total_s, "batch_ms": timing.batch_ms, "records_out": len(out),
            "sink_steps": commits.steps() if commits else []}


def run_child(spec: dict, timeout: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "bench.first_query", "--child", json.dumps(spec)], cwd=ROOT,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: the child's JVM too
        proc.communicate()
        raise TimeoutError(f"no result within {timeout:.0f} s") from None
    reports = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not reports:
        last = [line for line in err.splitlines() if line.strip()][-1:] or ["(no output)"]
        raise RuntimeError(f"exit {proc.returncode}: {last[0][:300]}")
    return json.loads(reports[-1])


def summary(runs: list[dict], variants: list[str]) -> list[dict]:
    rows = []
    for variant in variants:
        mine = [r for r in runs if r["variant"] == variant]
        if not mine:
            continue
        first_ms = [r["batch_ms"]["triggerExecution"][0] for r in mine if r["batch_ms"].get("triggerExecution")]
        rows.append({"variant": variant, "runs": len(mine),
                     **{f: statistics.median(r[f] or 0.0 for r in mine) for f in FIGURES},
                     **{f"{f}_all": [round(r[f] or 0.0, 2) for r in mine] for f in FIGURES},
                     "first_batch_ms": statistics.median(first_ms) if first_ms else None,
                     "load": [round(r["load"], 1) for r in mine],
                     "sink_batches_ms": _sink_batches(mine)})
    return rows


def _sink_batches(runs: list[dict]) -> list[dict]:
    """Per micro-batch (the steps of one end at its commit), the median ms of the sink's
    planner check, its slowest task and its driver commit over the runs."""
    per_run = []
    for r in runs:
        batches, current = [], {"prepare": 0.0, "task": 0.0, "commit": 0.0}
        for step in r.get("sink_steps", []):
            current[step["step"]] = max(current[step["step"]], step["seconds"] * 1000)
            if step["step"] == "commit":
                batches.append(current)
                current = {"prepare": 0.0, "task": 0.0, "commit": 0.0}
        per_run.append(batches)
    n = min((len(b) for b in per_run), default=0)
    return [{k: statistics.median(b[i][k] for b in per_run) for k in ("prepare", "task", "commit")}
            for i in range(n)]


def verdict(rows: list[dict]) -> dict:
    by = {r["variant"]: r for r in rows}
    eos, builtin = by.get("kafka_eos exactly_once"), by.get("builtin")
    if eos is None or builtin is None:
        return {}
    total = eos["total_s"] / builtin["total_s"]
    return {"total_ratio": total, "query_ratio": eos["query_s"] / builtin["query_s"], "goal": GOAL,
            "met": total <= GOAL}


def markdown(rows: list[dict], goal: dict, settings: dict) -> str:
    def cell(r: dict, f: str) -> str:
        return f"{r[f]:.1f} ({', '.join(f'{v:.1f}' for v in r[f + '_all'])})"

    lines = [f"The first query in a fresh SparkSession (a fresh process per run), Kafka -> Spark -> Kafka: "
             f"{settings['records']:,} records of {settings['size']} B, {settings['partitions']} partitions, "
             f"AvailableNow in 2 micro-batches; median (every run) in seconds; {settings['date']}, pyspark "
             f"{settings['pyspark']}, built-in connector {settings['builtin_connector']}, {settings['cpus']} cores.",
             "", "| pipeline | runs | total s | session s | query s | in batches s | first batch ms | load |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        first = "" if r["first_batch_ms"] is None else f"{r['first_batch_ms']:,.0f}"
        lines.append(f"| {r['variant']} | {r['runs']} | {cell(r, 'total_s')} | {cell(r, 'session_s')} | "
                     f"{cell(r, 'query_s')} | {cell(r, 'in_batches_s')} | {first} | "
                     f"{', '.join(str(v) for v in r['load'])} |")
    for r in rows:
        for i, b in enumerate(r["sink_batches_ms"]):
            lines.append(f"{'' if i else chr(10)}{r['variant']}, micro-batch {i}: sink planner {b['prepare']:,.0f} ms, "
                         f"slowest task {b['task']:,.0f} ms, driver commit {b['commit']:,.0f} ms (medians).")
    if goal:
        lines += ["", f"kafka_eos / built-in: total {goal['total_ratio']:.2f}x, query {goal['query_ratio']:.2f}x. "
                  f"Goal, the first query within {GOAL}x of the built-in's (total s): "
                  f"{'met' if goal['met'] else '**missed**'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_query")
    parser.add_argument("--reps", type=int, default=3, help="runs per variant, alternated")
    parser.add_argument("--records", type=int, default=20_000, help="input records (2 micro-batches)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--out", help="output directory (default: a temp dir)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-first-query-"))
    out.mkdir(parents=True, exist_ok=True)
    import pyspark

    from bench.cluster import bench_kafka
    from bench.latency import VARIANTS
    from bench.run import _seeded_topic
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars
    from kafka_eos_tools.topics import create_topic

    jars, connector = builtin_kafka_jars()
    runs: list[dict] = []
    failed: list[str] = []
    order = list(VARIANTS)
    with bench_kafka(args.bootstrap) as (bootstrap, kafka):
        settings = {**{k: v for k, v in vars(args).items() if k not in ("bootstrap", "out", "child")},
                    "date": time.strftime("%Y-%m-%d"), "pyspark": pyspark.__version__,
                    "builtin_connector": connector, "cpus": os.cpu_count(), "kafka": kafka}
        topic = _seeded_topic(bootstrap, args.size, args.partitions, args.records, 1)
        outputs = [create_topic(bootstrap, f"first-query-out-{uuid.uuid4().hex[:8]}", args.partitions)
                   for _ in range(args.reps * len(order))]
        time.sleep(2)  # let the broker finish creating the partitions' logs
        for rep in range(args.reps):
            for variant in (order if rep % 2 == 0 else order[::-1]):
                spec = {"fmt": VARIANTS[variant], "bootstrap": bootstrap, "topic": topic, "out_topic": outputs.pop(),
                        "records": args.records, "jars": jars}
                load = os.getloadavg()[0]
                try:
                    run = {"variant": variant, "rep": rep, "load": load, **run_child(spec, args.timeout)}
                except Exception as exc:  # one failed run must not lose the others
                    failed.append(f"{variant} rep {rep}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                    print(f"{variant} FAILED: {failed[-1]}", flush=True)
                    continue
                print(f"{variant:<24} rep {rep} total {run['total_s']:5.1f}s session {run['session_s']:5.1f}s "
                      f"query {run['query_s']:5.1f}s (in batches {run['in_batches_s'] or 0:.1f}s) "
                      f"out {run['records_out']:,} load {load:.1f}", flush=True)
                if run["records_out"] != args.records:
                    failed.append(f"{variant} rep {rep}: the output topic holds {run['records_out']:,} records, "
                                  f"the input {args.records:,}")
                    continue
                runs.append(run)
    rows = summary(runs, order)
    goal = verdict(rows)
    (out / "first_query.json").write_text(json.dumps({"settings": settings, "results": rows, "goal": goal,
                                                      "failures": failed, "runs": runs}, indent=2))
    text = markdown(rows, goal, settings) + "".join(f"\nFAILED: {f}\n" for f in failed)
    (out / "first_query.md").write_text(text)
    print(text)
    print("wrote", out / "first_query.json", out / "first_query.md")
    return 1 if failed or not goal else 0


if __name__ == "__main__":
    sys.exit(main())
