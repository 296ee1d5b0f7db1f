"""End-to-end latency of a running pipeline at a steady input rate.

    python -m bench.latency [--rate 1000] [--size 1024] [--seconds 60] [--reps 2]
                                        [--bootstrap host:9092] [--out bench/results]

For each variant a streaming query runs Kafka -> Spark -> Kafka with the default trigger
(the next micro-batch starts as soon as the previous one ends): the kafka_eos source into
the kafka_eos exactly-once sink, and the built-in source into the built-in (at-least-once)
sink. A producer writes ``rate`` records/s of ``size`` bytes to IN (keyed, the send time in
the value), and a ``read_committed`` consumer of OUT takes, for every record, the time
from its ``produce()`` call to its being readable there: what a downstream exactly-once
reader waits. Input sent before the query delivers its first records, and during the first
``warmup`` seconds, is not counted (the query's start, its first batches). Variants
alternate A B, B A, ...; both see the same machine.

Writes ``latency.json`` and ``latency.md`` to ``--out`` (default: a temp directory).
No figure is a pass/fail criterion.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import formats
from bench import workloads as w
from bench.run import percentile
from kafka_eos_tools.topics import create_topic

VARIANTS = {"kafka_eos exactly_once": w.EOS, "builtin": w.BUILTIN}


@dataclass
class LatencyRun:
    variant: str
    rate: int
    size: int
    partitions: int
    sent: int = 0
    counted: int = 0          # records sent after the warm-up
    warm_received: int = 0    # warm-up records read from OUT
    received: int = 0         # of those, read from OUT
    duplicates: int = 0
    latencies_ms: list = field(default_factory=list)
    load: float = 0.0
    # Where a micro-batch's time goes: Spark's durationMs per batch with input, and (the
    # exactly-once sink as kafka_eos_timed) its planner check, tasks and driver commit.
    spark_ms: dict = field(default_factory=dict)
    prepare_s: list = field(default_factory=list)
    commit_s: list = field(default_factory=list)
    task_s: list = field(default_factory=list)
    task_input_s: list = field(default_factory=list)

    def percentile(self, q: float) -> float | None:
        return percentile(self.latencies_ms, q)


def _send_steadily(bootstrap: str, topic: str, rate: int, size: int, seconds: float, warmup: float,
                   run: LatencyRun, stop: threading.Event) -> None:
    """Produce ``rate`` records/s: warm-up records until ``warmup`` seconds passed and the
    query has delivered some of them (it is past its start), then ``seconds`` of counted
    ones. The value starts with ``<counted 0/1>|<send time ns>|``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    pad = b"x" * max(0, size - 32)
    started = time.monotonic()
    counting_from = None
    while not stop.is_set():
        elapsed = time.monotonic() - started
        if counting_from is None and elapsed >= warmup and run.warm_received > 0:
            counting_from = elapsed
        if counting_from is not None and elapsed >= counting_from + seconds:
            break
        if elapsed > warmup + seconds + 300:
            raise TimeoutError("the query delivered none of the warm-up records within 5 minutes")
        measured = counting_from is not None
        due = int(elapsed * rate) + 1
        while run.sent < due:
            value = b"%d|%d|" % (int(measured), time.time_ns()) + pad
            while True:
                try:
                    producer.produce(topic, value, str(run.sent % 1000).encode())
                    break
                except BufferError:
                    producer.poll(0.005)
            run.sent += 1
            run.counted += measured
        producer.poll(0)
        time.sleep(max(0.0, started + (run.sent / rate) - time.monotonic()))
    producer.flush(60)


def _read_out(bootstrap: str, topic: str, partitions: int, run: LatencyRun, stop: threading.Event) -> None:
    """Read OUT (read_committed) from the start; record each counted record's latency."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 10, "fetch.queue.backoff.ms": 1})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: set[bytes] = set()
    try:
        while not stop.is_set():
            for m in consumer.consume(1000, 0.02):
                if m.error() is not None:
                    continue
                arrived = time.time_ns()
                flag, sent_ns, _ = (m.value() or b"||").split(b"|", 2)
                if flag != b"1":
                    run.warm_received += 1
                    continue
                if sent_ns in seen:
                    run.duplicates += 1
                    continue
                seen.add(sent_ns)
                run.received += 1
                run.latencies_ms.append((arrived - int(sent_ns)) / 1e6)
    finally:
        consumer.close()


def start_query(spark, variant: str, bootstrap: str, in_topic: str, out_topic: str, ckpt: str,
                commits: formats.CommitLog | None = None):
    """The pipeline under test: ``variant``'s source on IN into its sink on OUT, default
    trigger (with ``commits``, kafka_eos's sink as kafka_eos_timed: the same writers, timed)."""
    fmt = VARIANTS[variant]
    df = w._reader(spark, fmt, bootstrap, in_topic).selectExpr("key", "value")
    sink = formats.TIMED if commits and fmt == w.EOS else fmt
    writer = (df.writeStream.format(sink).option("kafka.bootstrap.servers", bootstrap)
              .option("topic", out_topic).option("checkpointLocation", ckpt))
    return w._eos_options(writer, sink, commits).start()


def measure(spark, bootstrap: str, variant: str, rate: int, size: int, partitions: int, seconds: float,
            warmup: float, log) -> LatencyRun:
    in_topic = create_topic(bootstrap, f"latency-in-{uuid.uuid4().hex[:8]}", partitions)
    out_topic = create_topic(bootstrap, f"latency-out-{uuid.uuid4().hex[:8]}", partitions)
    run = LatencyRun(variant, rate, size, partitions)
    stop = threading.Event()
    reader = threading.Thread(target=_read_out, args=(bootstrap, out_topic, partitions, run, stop), daemon=True)
    reader.start()
    commits = formats.CommitLog() if VARIANTS[variant] == w.EOS else None
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as ckpt:
        query = start_query(spark, variant, bootstrap, in_topic, out_topic, ckpt, commits)
        try:
            run.load = os.getloadavg()[0]
            _send_steadily(bootstrap, in_topic, rate, size, seconds, warmup, run, stop)
            deadline = time.monotonic() + 60  # the last batches drain
            while run.received < run.counted and time.monotonic() < deadline and query.isActive:
                time.sleep(0.2)
            if query.exception() is not None:
                raise RuntimeError(f"{variant}: the query failed: {query.exception()}")
        finally:
            stop.set()
            query.stop()
            reader.join(30)
    for p in query.recentProgress:
        if p["numInputRows"] > 0:
            for name, ms in p["durationMs"].items():
                run.spark_ms.setdefault(name, []).append(ms)
    if commits:
        commits.add_to(run)
    log(f"{variant:<24} sent {run.sent:,} counted {run.counted:,} received {run.received:,} "
        f"p50 {run.percentile(0.5) or 0:.0f} ms p99 {run.percentile(0.99) or 0:.0f} ms load {run.load:.1f}")
    return run


def summary(runs: list[LatencyRun]) -> list[dict]:
    rows = []
    for variant in VARIANTS:
        mine = [r for r in runs if r.variant == variant]
        if not mine:
            continue
        every = [v for r in mine for v in r.latencies_ms]
        rows.append({"variant": variant, "runs": len(mine), "rate": mine[0].rate, "size": mine[0].size,
                     "partitions": mine[0].partitions, "counted": sum(r.counted for r in mine),
                     "received": sum(r.received for r in mine), "duplicates": sum(r.duplicates for r in mine),
                     "p50_ms": percentile(every, 0.5), "p90_ms": percentile(every, 0.9),
                     "p99_ms": percentile(every, 0.99), "max_ms": max(every) if every else None,
                     "mean_ms": statistics.fmean(every) if every else None,
                     "p50_per_run_ms": [r.percentile(0.5) for r in mine],
                     "p99_per_run_ms": [r.percentile(0.99) for r in mine],
                     "load": [round(r.load, 1) for r in mine], "batch_p50_ms": _batch_profile(mine)})
    return rows


def _batch_profile(runs: list[LatencyRun]) -> dict:
    """Median ms of each step of a micro-batch with input (Spark's recentProgress: the last
    100 batches of each run; the sink's steps: every batch)."""
    steps = {f"spark {name}": [v for r in runs for v in r.spark_ms.get(name, [])]
             for name in ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit",
                          "commitOffsets")}
    steps.update({"sink planner": [s * 1000 for r in runs for s in r.prepare_s],
                  "sink task": [s * 1000 for r in runs for s in r.task_s],
                  "sink task input wait": [s * 1000 for r in runs for s in r.task_input_s],
                  "sink commit": [s * 1000 for r in runs for s in r.commit_s]})
    return {name: statistics.median(values) for name, values in steps.items() if values}


def markdown(rows: list[dict], settings: dict) -> str:
    def ms(v):
        return "" if v is None else f"{v:,.0f}"

    lines = [f"End-to-end latency, produce() to readable by a read_committed consumer of OUT: "
             f"{settings['rate']:,} records/s of {settings['size']} B, {settings['partitions']} partitions, "
             f"{settings['seconds']:.0f} s counted per run after {settings['warmup']:.0f} s of warm-up, "
             f"default trigger; {settings['date']}, pyspark {settings['pyspark']}.", "",
             "| pipeline | runs | records counted / read | duplicates | p50 ms | p90 ms | p99 ms | max ms | "
             "p50 per run | p99 per run | load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['runs']} | {r['counted']:,} / {r['received']:,} | {r['duplicates']} | "
                     f"{ms(r['p50_ms'])} | {ms(r['p90_ms'])} | {ms(r['p99_ms'])} | {ms(r['max_ms'])} | "
                     f"{', '.join(ms(v) for v in r['p50_per_run_ms'])} | "
                     f"{', '.join(ms(v) for v in r['p99_per_run_ms'])} | "
                     f"{', '.join(str(v) for v in r['load'])} |")
    names = list(dict.fromkeys(n for r in rows for n in r["batch_p50_ms"]))
    if names:
        lines += ["", "Where a micro-batch with input spends its time, median ms (Spark's `durationMs`; the sink's "
                  "steps timed by kafka_eos_timed):", "", "| step | " + " | ".join(r["variant"] for r in rows) + " |",
                  "|---|" + "---:|" * len(rows)]
        lines += [f"| {n} | " + " | ".join(ms(r["batch_p50_ms"].get(n)) for r in rows) + " |" for n in names]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency")
    parser.add_argument("--rate", type=int, default=1000, help="input records per second")
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0, help="counted seconds of input per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds of input sent first, not counted")
    parser.add_argument("--reps", type=int, default=2, help="runs per variant, alternated")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--out", help="output directory (default: a temp dir)")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-latency-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark

    from bench.cluster import bench_kafka
    from bench.run import _spark
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

    def log(line: str) -> None:
        print(line, flush=True)

    jars, connector = builtin_kafka_jars()
    runs: list[LatencyRun] = []
    failed: list[str] = []
    with bench_kafka(args.bootstrap) as (bootstrap, kafka):
        settings = {**{k: v for k, v in vars(args).items() if k not in ("bootstrap", "out")},
                    "date": time.strftime("%Y-%m-%d"), "pyspark": pyspark.__version__,
                    "builtin_connector": connector, "cpus": os.cpu_count(), "kafka": kafka}
        spark = _spark(jars)
        try:
            order = list(VARIANTS)
            for rep in range(args.reps):
                for variant in (order if rep % 2 == 0 else order[::-1]):
                    try:
                        runs.append(measure(spark, bootstrap, variant, args.rate, args.size, args.partitions,
                                            args.seconds, args.warmup, log))
                    except Exception as exc:  # one failed run must not lose the others
                        failed.append(f"{variant}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                        log(f"{variant} FAILED: {failed[-1]}")
        finally:
            spark.stop()
    rows = summary(runs)
    (out / "latency.json").write_text(json.dumps({"settings": settings, "results": rows, "failures": failed,
                                                  "runs": [{**asdict(r), "latencies_ms": None, "spark_ms": None}
                                                           for r in runs]},
                                                 indent=2))
    text = markdown(rows, settings) + "".join(f"\nFAILED: {f}\n" for f in failed)
    (out / "latency.md").write_text(text)
    print(text)
    print("wrote", out / "latency.json", out / "latency.md")
    lost = any(r["received"] < r["counted"] for r in rows)
    return 1 if failed or lost or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
