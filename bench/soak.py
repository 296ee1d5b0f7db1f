"""Memory soak: a long-running exactly-once pipeline at a steady input rate.

    python -m bench.soak [--minutes 30] [--rate 500] [--size 10240] [--partitions 4]
                         [--sample-s 10] [--bootstrap host:9092] [--out DIR]

The goal under test: "Memory stays flat: largest Python worker < 500 MB on 10 KiB records;
the driver's Python process stable over a 30-minute run". One streaming query runs the
kafka_eos source into the kafka_eos exactly-once sink with the default trigger (the pipeline
of :mod:`bench.latency`; the built-in connector runs no Python, so it has no variant here).
A producer writes ``rate`` records/s of ``size`` bytes to IN and a ``read_committed``
consumer of OUT counts what arrives; both are bench.latency's, run in child processes so
that their own state (the consumer's set of seen records grows by every record) does not
land in the driver process measured here.

Every ``sample_s`` seconds the resident set size (RSS) of: this process (the driver's Python
process: the SparkSession's py4j side, no connector code); the forks of the pyspark daemon
that run tasks (the Python workers); the Python processes Spark starts for the data source's
driver-side steps, by module (pyspark 4: a daemon per module whose forks are reused, and
exit after a minute idle; the source's offsets and partitions run in
python_streaming_source_runner, the sink's writer in write_into_data_source and its commit
in python_streaming_sink_runner); Spark's JVM, for context. The first 120 s (10% of runs
shorter than 20 min) are warm-up: class loading and the first batches, not in start, end or
slope. Slopes are least-squares fits over the samples after the warm-up, in MB per 10 minutes.

Verdicts: "largest Python worker < 500 MB" over every sample; "driver's Python process
stable" when its slope is under 5 MB/10 min and end - start under 20 MB. The threshold:
with a micro-batch every 1-2 s a run has 300-600 batches per 10 minutes, so a leak of one
10 KiB record (or a progress dict of that size) per batch grows by 3-6 MB per 10 minutes,
15 MB or more over 30 minutes; allocator noise moves an idle Python process's RSS by a few
MB without a trend. Then the producer stops and the query drains (until OUT has every
record, at most 120 s): a record lost or duplicated fails the run (exit 1).

Writes ``soak.json`` (settings, every sample, summary) and ``soak.md`` to ``--out``
(default: a temp directory).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.latency import _read_out, _send_steadily, start_query
from bench.memory import _is_worker, _rss_bytes
from kafka_eos_tools.demo.processes import descendants
from kafka_eos_tools.topics import create_topic

MB = 1024 * 1024
WORKER_LIMIT_MB = 500
SLOPE_LIMIT, GROWTH_LIMIT = 5.0, 20.0  # driver: MB per 10 min, MB from start to end
COUNTERS = ("sent", "counted", "warm_received", "received", "duplicates")
# Topics keep at most this much per partition (a 30-minute run at the defaults writes
# ~18 GB); 512 MiB is minutes of input, far more than the query may lag without failing.
TOPIC_CONFIG = {"retention.bytes": str(512 * MB), "segment.bytes": str(64 * MB)}
CTX = multiprocessing.get_context("spawn")  # no fork of a process that runs a JVM gateway


class SharedRun:
    """bench.latency's LatencyRun counters in shared memory, for its producer and reader in
    child processes (each counter has one writer); latencies are dropped."""

    def __init__(self) -> None:
        self.__dict__["_values"] = {name: CTX.RawValue("q", 0) for name in COUNTERS}
        self.__dict__["latencies_ms"] = collections.deque(maxlen=0)

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):  # unpickling looks up __setstate__ before _values exists
            raise AttributeError(name)
        return self._values[name].value

    def __setattr__(self, name: str, value: int) -> None:
        self._values[name].value = value


def _role(pid: int) -> str | None:
    """What a descendant is: 'jvm', 'worker', a driver-side module, or None (not counted)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    exe, line = os.path.basename(argv[0]), " ".join(argv)
    if exe == "java":
        return "jvm" if "SparkSubmit" in line else None  # not the embedded Kafka
    if not exe.startswith("python") or "multiprocessing" in line:
        return None  # this benchmark's producer, reader and their resource tracker
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else line
    if module != "pyspark.daemon":
        return module  # a simple worker, e.g. the streaming source's driver-side runner
    if not _is_worker(pid):
        return None  # a daemon only forks (~45 MB, the same all run); its forks do the work
    # Spark starts one daemon per module it runs: pyspark.worker runs tasks; the
    # pyspark.sql.worker.* ones are the data source's driver-side steps.
    served = argv[argv.index("-m") + 2] if len(argv) > argv.index("-m") + 2 else "pyspark.worker"
    return "worker" if served == "pyspark.worker" else served


def sample(started: float, phase: str, run: SharedRun) -> dict:
    workers, jvm, driver_side = [], 0.0, []
    for pid in descendants(os.getpid()):
        role = _role(pid)
        if role == "worker":
            workers.append(_rss_bytes(pid) / MB)
        elif role == "jvm":
            jvm += _rss_bytes(pid) / MB
        elif role is not None:
            driver_side.append([role, pid, _rss_bytes(pid) / MB])
    return {"t": round(time.monotonic() - started, 1), "phase": phase, "load": os.getloadavg()[0],
            "sent": run.sent, "received": run.received + run.warm_received, "duplicates": run.duplicates,
            "driver_mb": _rss_bytes(os.getpid()) / MB, "workers_mb": workers, "jvm_mb": jvm,
            "driver_side": driver_side}


def series(samples: list[dict], value) -> dict:
    """Start/end (median of the first/last 3 steady samples), max over the run, and slope."""
    values = [(s["t"], s["phase"], value(s)) for s in samples]
    values = [v for v in values if v[2] is not None]  # a process not there then
    steady = [(t, v) for t, phase, v in values if phase == "steady"]
    out = {"max": max((v for *_, v in values), default=None), "start": None, "end": None, "slope": None}
    if len(steady) >= 3:
        out["start"] = statistics.median(v for _, v in steady[:3])
        out["end"] = statistics.median(v for _, v in steady[-3:])
        if len({t for t, _ in steady}) > 1:
            out["slope"] = statistics.linear_regression([t for t, _ in steady], [v for _, v in steady]).slope * 600
    return out


def _stable(r: dict) -> bool | None:
    if r["slope"] is None:
        return None
    return r["slope"] < SLOPE_LIMIT and r["end"] - r["start"] < GROWTH_LIMIT


def _seen(samples: list[dict], pid: int) -> str:
    times = [s["t"] for s in samples if any(p == pid for _, p, _ in s["driver_side"])]
    return f"{times[0]:.0f}-{times[-1]:.0f} s"


def summarize(samples: list[dict], run: SharedRun) -> dict:
    rows = {"driver Python (this process)": series(samples, lambda s: s["driver_mb"]),
            "largest Python worker": series(samples, lambda s: max(s["workers_mb"], default=0.0)),
            "Python workers, sum": series(samples, lambda s: sum(s["workers_mb"])),
            "Spark JVM": series(samples, lambda s: s["jvm_mb"])}
    # Spark-started driver-side processes, by module (the largest if several): an idle
    # daemon fork exits after a minute, so a sum over them would step, not trend.
    for module in sorted({role for s in samples for role, _, _ in s["driver_side"]}):
        rows[f"driver-side {module}"] = r = series(samples, lambda s, m=module: max(
            (mb for role, _, mb in s["driver_side"] if role == m), default=None))
        # Not the goal's process, but the sink's driver-side steps run there: the same test.
        r["verdict"] = {None: "", True: "stable", False: "growing"}[_stable(r)]
    driver, worker = rows["driver Python (this process)"], rows["largest Python worker"]
    driver["verdict"] = {None: "n/a (too short)", True: "met", False: "missed"}[_stable(driver)] + \
        f": slope < {SLOPE_LIMIT:.0f} MB/10 min, end - start < {GROWTH_LIMIT:.0f} MB"
    worker["verdict"] = ("met" if (worker["max"] or 0) < WORKER_LIMIT_MB else "missed") + f": < {WORKER_LIMIT_MB} MB"
    warm_sent = run.sent - run.counted
    lost = (run.counted - run.received) + max(0, warm_sent - run.warm_received)
    duplicates = run.duplicates + max(0, run.warm_received - warm_sent)
    processes = sorted({f"{role} (pid {pid}, seen {_seen(samples, pid)})"
                        for s in samples for role, pid, _ in s["driver_side"]})
    return {"rows": rows, "sent": run.sent, "received": run.received + run.warm_received, "lost": lost,
            "duplicates": duplicates, "driver_side_processes": processes}


def markdown(summary: dict, settings: dict) -> str:
    def mb(v):
        return "" if v is None else f"{v:,.0f}"

    lines = [f"Memory soak, kafka_eos source -> kafka_eos exactly-once sink, default trigger: "
             f"{settings['rate']:,} records/s of {settings['size']} B, {settings['partitions']} partitions, "
             f"{settings['minutes']:g} min, a sample every {settings['sample_s']:g} s, the first "
             f"{settings['warmup_s']:.0f} s warm-up; {settings['date']}, pyspark {settings['pyspark']}, "
             f"load {settings['load']:.1f}.", "",
             "| process (RSS) | start MB | end MB | max MB | slope MB/10 min | verdict |",
             "|---|---:|---:|---:|---:|---|"]
    for name, r in summary["rows"].items():
        slope = "" if r["slope"] is None else f"{r['slope']:+.1f}"
        lines.append(f"| {name} | {mb(r['start'])} | {mb(r['end'])} | {mb(r['max'])} | {slope} | "
                     f"{r.get('verdict', '')} |")
    ok = summary["lost"] == 0 and summary["duplicates"] == 0
    lines += ["", f"Exactly-once: sent {summary['sent']:,}, read from OUT {summary['received']:,}, "
                  f"lost {summary['lost']:,}, duplicates {summary['duplicates']:,}: {'met' if ok else 'MISSED'}.",
              "", "Driver-side Python processes seen: " + (", ".join(summary["driver_side_processes"]) or "none")]
    return "\n".join(lines) + "\n"


def soak(spark, bootstrap: str, args, run: SharedRun, samples: list[dict], log) -> None:
    """Run the query and the producer for ``args.minutes``, then drain; append to ``samples``."""
    in_topic = create_topic(bootstrap, f"soak-in-{uuid.uuid4().hex[:8]}", args.partitions, config=TOPIC_CONFIG)
    out_topic = create_topic(bootstrap, f"soak-out-{uuid.uuid4().hex[:8]}", args.partitions, config=TOPIC_CONFIG)
    stop_sending, stop_reading = CTX.Event(), CTX.Event()
    reader = CTX.Process(target=_read_out, args=(bootstrap, out_topic, args.partitions, run, stop_reading))
    # No end of its own (the run ends it): the query's first delivery ends its warm-up records.
    sender = CTX.Process(target=_send_steadily, args=(bootstrap, in_topic, args.rate, args.size, 1e9, 0.0,
                                                      run, stop_sending))
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as ckpt:
        reader.start()
        query = start_query(spark, "kafka_eos exactly_once", bootstrap, in_topic, out_topic, ckpt)
        started, drain_until = time.monotonic(), None
        sender.start()
        try:
            while True:
                elapsed = time.monotonic() - started
                if elapsed >= len(samples) * args.sample_s:
                    phase = "drain" if drain_until else "warmup" if elapsed < args.warmup_s else "steady"
                    samples.append(sample(started, phase, run))
                    s = samples[-1]
                    log(f"{s['t']:7.0f} s {phase:<6} sent {s['sent']:>9,} read {s['received']:>9,} "
                        f"driver {s['driver_mb']:5.0f} MB worker max {max(s['workers_mb'], default=0):5.0f} MB "
                        f"driver-side {sum(mb for *_, mb in s['driver_side']):5.0f} MB "
                        f"jvm {s['jvm_mb']:5.0f} MB load {s['load']:.1f}")
                if query.exception() is not None or not query.isActive:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                if drain_until is None and (elapsed >= args.minutes * 60 or not sender.is_alive()):
                    stop_sending.set()
                    sender.join(90)  # it flushes what it produced
                    if sender.exitcode != 0:
                        raise RuntimeError(f"the producer failed (exit code {sender.exitcode})")
                    drain_until = time.monotonic() + 120
                if drain_until and (run.received + run.warm_received >= run.sent or time.monotonic() > drain_until):
                    time.sleep(2)  # a batch still committing would add its duplicates
                    return
                time.sleep(0.5)
        finally:
            query.stop()
            stop_sending.set()
            stop_reading.set()
            for child in (sender, reader):
                if child.pid is not None:
                    child.join(30)
                    if child.is_alive():
                        child.kill()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of input")
    parser.add_argument("--rate", type=int, default=500, help="input records per second")
    parser.add_argument("--size", type=int, default=10240, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between memory samples")
    parser.add_argument("--bootstrap", help="existing Kafka (default: an embedded one)")
    parser.add_argument("--out", help="output directory (default: a temp dir)")
    args = parser.parse_args(argv)
    args.warmup_s = min(120.0, args.minutes * 6)  # 2 minutes, or 10% of a shorter run
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pyspark

    from bench.cluster import bench_kafka
    from bench.run import _spark
    from kafka_eos_tools.builtin_kafka import builtin_kafka_jars

    def log(line: str) -> None:
        print(line, flush=True)

    jars, _ = builtin_kafka_jars()
    failure: str | None = None
    run = SharedRun()
    samples: list[dict] = []
    with bench_kafka(args.bootstrap) as (bootstrap, kafka):
        settings = {**{k: v for k, v in vars(args).items() if k not in ("bootstrap", "out")},
                    "date": time.strftime("%Y-%m-%d"), "pyspark": pyspark.__version__, "cpus": os.cpu_count(),
                    "kafka": kafka, "driver_pid": os.getpid()}
        spark = _spark(jars)
        try:
            soak(spark, bootstrap, args, run, samples, log)
        except Exception as exc:  # still report the samples taken so far
            failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        finally:
            spark.stop()
    settings["load"] = statistics.fmean(s["load"] for s in samples) if samples else 0.0
    summary = summarize(samples, run)
    (out / "soak.json").write_text(json.dumps({"settings": settings, "summary": summary, "failure": failure,
                                               "samples": samples}, indent=2))
    text = markdown(summary, settings) + (f"\nFAILED: {failure}\n" if failure else "")
    (out / "soak.md").write_text(text)
    print(text)
    print("wrote", out / "soak.json", out / "soak.md")
    return 1 if failure or summary["lost"] or summary["duplicates"] else 0


if __name__ == "__main__":
    sys.exit(main())
