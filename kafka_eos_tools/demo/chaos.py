"""Crash a running exactly-once pipeline again and again, then prove nothing was lost
or duplicated.

One run: feed topic IN with records that carry unique ids, start the pipeline
(:mod:`kafka_eos_tools.demo.job`) as its own driver process, SIGKILL it (with its JVM and
Python workers) at random moments and start it again from the same checkpoint, then
let a final run drain the input (Trigger.AvailableNow) and audit OUT. A tailing
``read_committed`` consumer watches OUT the whole time: it must never see a duplicate
either. Every wait is bounded; the run stops by itself.
"""

from __future__ import annotations

import random
import shutil
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_eos_ds.kafka.settings import logged
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_tools.audit import AuditReport, audit
from kafka_eos_tools.demo import processes

if TYPE_CHECKING:
    import subprocess

    from kafka_eos_tools.broker.cluster import EmbeddedKafka

Progress = Callable[[str, float], None]
Stamp = Callable[[int], int]  # a record's id -> its timestamp (ms since the epoch)


# What one bounce does. "hard" is SIGKILL (a crash), "clean" is SIGTERM (an orderly stop).
# "driver-inbatch" is a SIGKILL aimed inside a batch: after its tasks have written to OUT
# and before Spark recorded the batch as committed (the moment an at-least-once sink
# replays, and the one an exactly-once sink must survive between pre-commit and commit).
# "checkpoint-lost" is that kill followed by deleting the checkpoint: the next run is a
# new query that starts from the source's consumer group (crash point 7 of docs/dev/guarantees.md).
BOUNCES = ("driver-hard", "driver-clean", "driver-inbatch", "checkpoint-lost", "worker-hard", "broker-hard",
           "broker-clean")


@dataclass
class ChaosPlan:
    """One chaos run. ``bounces`` lists what happens, in order, each at a random moment
    of a window after the pipeline has written something; then a final run drains the
    input and the output is audited."""

    bootstrap: str
    workdir: Path
    records: int = 20_000  # the least input; more is fed while bounces remain
    input_partitions: int = 2
    output_partitions: int = 3
    bounces: list[str] = field(default_factory=lambda: ["driver-hard"] * 3)
    bounce_window: tuple[float, float] = (2.0, 10.0)
    max_offsets: int = 500
    shuffle: bool = False
    seed: int = 0
    run_timeout: float = 300.0
    replication: int = 1
    sink_format: str = "kafka_eos"
    spark_jars: str | None = None
    sink_options: list[str] = field(default_factory=list)
    job_args: list[str] = field(default_factory=list)  # more arguments of the job (--column ...)
    cluster: "EmbeddedKafka" | None = None  # needed for broker bounces
    broker_down_seconds: tuple[float, float] = (2.0, 8.0)


@dataclass
class ChaosResult:
    report: AuditReport
    crashes: int
    runs: int
    seconds: float
    tail_duplicates: int
    tail_records: int
    input_topic: str
    output_topic: str
    fed: int  # input records written (at least plan.records; more if the bounces took long)

    @property
    def ok(self) -> bool:
        return self.report.ok and self.tail_duplicates == 0


def create_topics(bootstrap: str, names: dict[str, int], replication: int) -> None:
    admin = AdminClient(logged({"bootstrap.servers": bootstrap}))
    futures = admin.create_topics([NewTopic(n, p, replication) for n, p in names.items()], operation_timeout=60)
    for future in futures.values():
        future.result(90)


def seed_input(bootstrap: str, topic: str, records: int, keys: int = 64, start: int = 0,
               timestamp_of: Stamp | None = None) -> None:
    """Records with ids ``start .. start + records - 1`` (see :func:`_produce_ids`)."""
    producer = _input_producer(bootstrap)
    _produce_ids(producer, topic, range(start, start + records), keys, timestamp_of)
    if producer.flush(120):
        raise RuntimeError(f"seeding {topic} did not finish")


def _input_producer(bootstrap: str):
    from confluent_kafka import Producer

    # Keys partitioned as a Java producer does, as the sink does too: with equal partition
    # counts each input partition's records go to one output partition, which the crash
    # tests' partial-visibility checks rely on (one open transaction per output partition).
    return Producer(logged({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                            "partitioner": "murmur2_random"}))


def _produce_ids(producer, topic: str, ids: range, keys: int, timestamp_of: Stamp | None = None) -> None:
    """Records ``b"<id>|..."`` keyed ``k<id % keys>``: one producer, ids in order, so
    each key's records are in id order (what the audit's order check relies on).
    ``timestamp_of``: each record's timestamp (ms) from its id (default: the producer's clock)."""
    for i in ids:
        stamp = {} if timestamp_of is None else {"timestamp": timestamp_of(i)}
        while True:
            try:
                producer.produce(topic, key=f"k{i % keys}".encode(), value=f"{i}|record {i} of the demo".encode(),
                                 **stamp)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)


class InputFeeder(threading.Thread):
    """Keeps IN ahead of the pipeline while the bounces go on, then tops it up.

    Seeding all the input up front let a fast run drain it before its last bounce (a
    bounce on an idle pipeline proves little, and one aimed inside a batch never comes).
    So the feeder keeps about ``ahead`` records not yet seen in OUT, until ``finish()``;
    then it writes whatever is missing to reach ``at_least`` and stops. The input is the
    ids 0..fed-1, so ``fed`` is at least ``at_least`` and grows with the bounces' length.
    ``first`` shifts the ids (``first .. first+fed-1``: two inputs of one table kept apart);
    ``timestamp_of`` gives each record its timestamp (:func:`_produce_ids`).
    """

    def __init__(self, bootstrap: str, topic: str, at_least: int, ahead: int, seen: Callable[[], int],
                 keys: int = 64, first: int = 0, timestamp_of: Stamp | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.at_least, self.ahead, self.seen, self.keys = (
            bootstrap, topic, at_least, ahead, seen, keys)
        self.first, self.timestamp_of = first, timestamp_of
        self.fed = 0
        self.finishing = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = _input_producer(self.bootstrap)
            while not self.finishing.is_set():
                if self.fed - self.seen() < self.ahead:
                    self._feed(producer, self.ahead // 2)
                else:
                    self.finishing.wait(0.2)
            self._feed(producer, max(0, self.at_least - self.fed))
        except BaseException as exc:  # surfaced by finish(): a feeder that died would starve the run
            self.error = exc

    def _feed(self, producer, count: int) -> None:
        start = self.first + self.fed
        _produce_ids(producer, self.topic, range(start, start + count), self.keys, self.timestamp_of)
        if producer.flush(120):
            raise RuntimeError(f"writing input to {self.topic} did not finish")
        self.fed += count

    def finish(self) -> int:
        """Stop feeding (after topping up to ``at_least``); the number of records fed."""
        self.finishing.set()
        self.join(180)
        if self.error is not None:
            raise RuntimeError(f"feeding {self.topic} failed: {self.error}") from self.error
        if self.is_alive():
            raise TimeoutError(f"feeding {self.topic} did not finish in 180s")
        return self.fed



# What a watermark request answers while a bounced broker's partitions change leader.
_LEADERS_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT,
                   KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN}


def high_watermark(watcher: Consumer, parts: list[TopicPartition]) -> int | None:
    """The sum of the partitions' high watermarks, or None while their leaders move after a
    broker bounce (the caller asks again): the watch must outlive the bounces it watches."""
    try:
        return sum(watcher.get_watermark_offsets(tp, timeout=5, cached=False)[1] for tp in parts)
    except KafkaException as e:
        if e.args[0].code() in _LEADERS_MOVING:
            return None
        raise


def committed_end(bootstrap: str, topic: str) -> int:
    """Sum of read_committed end offsets (markers included: a progress estimate)."""
    consumer = Consumer(logged({"bootstrap.servers": bootstrap, "group.id": "kafka-eos-progress",
                                "isolation.level": "read_committed"}))
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                   for p in parts)
    except Exception:
        return 0
    finally:
        consumer.close()


class TailingReader(threading.Thread):
    """A read_committed consumer reading OUT while the pipeline runs and crashes."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.ids: Counter = Counter()
        self.stopping = threading.Event()

    def run(self) -> None:
        consumer = Consumer(logged({"bootstrap.servers": self.bootstrap,
                                    "group.id": f"kafka-eos-tail-{uuid.uuid4().hex}",
                                    "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                    "enable.auto.commit": False}))
        consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                for msg in consumer.consume(1000, 0.5):
                    value = msg.value()
                    if msg.error() is None and value is not None:
                        self.ids[value.split(b"|", 1)[0]] += 1
        finally:
            consumer.close()

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.ids.values() if n > 1)


def _job_cmd(plan: ChaosPlan, input_topic: str, output_topic: str, available_now: bool) -> list[str]:
    cmd = [sys.executable, "-m", "kafka_eos_tools.demo.job", "--bootstrap", plan.bootstrap,
           "--input", input_topic, "--output", output_topic,
           "--checkpoint", str(plan.workdir / "checkpoint"), "--prefix", f"demo-{output_topic}",
           "--max-offsets", str(plan.max_offsets), "--sink-format", plan.sink_format,
           # local[2,4]: a task whose Python worker is killed is retried, as on a cluster.
           "--master", "local[2,4]"]
    if plan.spark_jars:
        cmd += ["--jars", plan.spark_jars]
    if available_now:
        cmd.append("--available-now")
    if plan.shuffle:
        cmd.append("--shuffle")
    for option in plan.sink_options:
        cmd += ["--sink-option", option]
    return cmd + plan.job_args


class Pipeline:
    """The pipeline's driver process across restarts."""

    def __init__(self, plan: ChaosPlan, input_topic: str, output_topic: str, env: dict | None = None) -> None:
        # env: the driver's whole environment (default: this process's), e.g. with a fault injected
        self.plan, self.input_topic, self.output_topic, self.env = plan, input_topic, output_topic, env
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.self_exits = 0
        self.killed = False

    # A run may fail by itself after a broker bounce (it must then fail cleanly and the
    # restart must keep exactly-once); a run that keeps failing is a broken pipeline.
    MAX_SELF_EXITS = 4

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None and not self.killed:
                self.self_exits += 1
                if self.self_exits >= self.MAX_SELF_EXITS:
                    raise RuntimeError(f"the pipeline failed {self.self_exits} times by itself; last log "
                                       f"{self.log(self.runs)}:\n{_error_tail(self.log(self.runs))}")
            self.killed = False
            self.runs += 1
            self.proc = processes.start(_job_cmd(self.plan, self.input_topic, self.output_topic, False),
                                        self.log(self.runs), self.env)

    def log(self, run: int) -> Path:
        return self.plan.workdir / f"run-{run}.log"

    def kill(self, hard: bool) -> int:
        """Stop the driver: SIGKILL of the whole process tree (hard) or SIGTERM to the
        driver, which stops its query in order (clean); nothing of it is left after."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        victims = [self.proc.pid, *processes.descendants(self.proc.pid)]
        self.killed = True
        if hard:
            processes.kill_tree(self.proc.pid)
        else:
            processes.signal_quietly(self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except Exception:
                pass
            processes.wait_gone(victims, timeout=20)
        for pid in victims:  # a clean stop that hung, or children that outlived it
            processes.signal_quietly(pid, 9)
        processes.wait_gone(victims)
        self.proc.wait(10)
        return len(victims)

    def kill_workers(self) -> int:
        """SIGKILL the Python worker processes of the running driver (tasks fail and retry)."""
        if self.proc is None:
            return 0
        workers = [pid for pid in processes.descendants(self.proc.pid) if processes.is_python_worker(pid)]
        for pid in workers:
            processes.signal_quietly(pid, 9)
        return len(workers)


def run_chaos(plan: ChaosPlan, progress: Progress = lambda msg, frac: None) -> ChaosResult:
    started = time.monotonic()
    rng = random.Random(plan.seed)
    plan.workdir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"demo-in-{run_id}", f"demo-out-{run_id}"
    create_topics(plan.bootstrap, {input_topic: plan.input_partitions, output_topic: plan.output_partitions},
                  plan.replication)
    tail = TailingReader(plan.bootstrap, output_topic)
    tail.start()
    # Three batches ahead: one in flight, more queued, whatever the run's pace.
    feeder = InputFeeder(plan.bootstrap, input_topic, plan.records, 3 * plan.max_offsets, lambda: len(tail.ids))
    feeder.start()
    pipeline = Pipeline(plan, input_topic, output_topic)
    # Progress: distinct ids a read_committed reader has seen so far.
    def frac() -> float:
        return min(1.0, len(tail.ids) / max(plan.records, feeder.fed, 1))

    done = 0
    try:
        for number, bounce in enumerate(plan.bounces, 1):
            if bounce not in BOUNCES:
                raise ValueError(f"unknown bounce {bounce!r}; one of {BOUNCES}")
            pipeline.ensure_running()
            _wait_for_new_output(plan, pipeline, output_topic, progress, frac)
            if bounce in ("driver-inbatch", "checkpoint-lost"):
                killed = _kill_inside_batch(plan, pipeline, output_topic, progress, frac)
                if killed and bounce == "checkpoint-lost":
                    shutil.rmtree(plan.workdir / "checkpoint")
                done += killed
                progress(f"bounce {number}/{len(plan.bounces)}: {bounce} done", frac())
                continue
            moment = time.monotonic() + rng.uniform(*plan.bounce_window)
            while time.monotonic() < moment:
                pipeline.ensure_running()
                progress(f"run {pipeline.runs}: bounce {number}/{len(plan.bounces)} ({bounce}) soon", frac())
                time.sleep(0.5)
            _bounce(plan, pipeline, bounce, rng)
            done += 1
            progress(f"bounce {number}/{len(plan.bounces)}: {bounce} done", frac())
        pipeline.kill(hard=False)
        fed = feeder.finish()
        drain(plan, pipeline, progress, frac)
        progress("auditing", 1.0)
        report = audit({"bootstrap.servers": plan.bootstrap}, input_topic, output_topic)
        time.sleep(2.0)  # let the tailing reader catch up before it stops
    finally:
        feeder.finishing.set()
        if pipeline.proc is not None and pipeline.proc.poll() is None:
            processes.kill_tree(pipeline.proc.pid)
        tail.stopping.set()
        tail.join(10)
    return ChaosResult(report, done, pipeline.runs, time.monotonic() - started, tail.duplicates,
                       sum(tail.ids.values()), input_topic, output_topic, fed)


def _error_tail(log: Path, lines: int = 12) -> str:
    try:
        text = [line for line in log.read_text(errors="replace").splitlines()
                if "rdkafka" not in line and not line.lstrip().startswith("at ")]
    except OSError:
        return "(no log)"
    errors = [line for line in text if "Error" in line or "Exception" in line]
    return "\n".join((errors or text)[-lines:])


def _wait_for_new_output(plan: ChaosPlan, pipeline: Pipeline, output_topic: str, progress: Progress,
                         frac: Callable[[], float]) -> None:
    base = committed_end(plan.bootstrap, output_topic)
    deadline = time.monotonic() + plan.run_timeout
    while committed_end(plan.bootstrap, output_topic) <= base:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no new output within {plan.run_timeout:.0f}s; see {pipeline.log(pipeline.runs)}")
        if frac() >= 1.0:
            return
        pipeline.ensure_running()
        progress(f"run {pipeline.runs}: waiting for output", frac())
        time.sleep(0.5)


def _kill_inside_batch(plan: ChaosPlan, pipeline: Pipeline, output_topic: str, progress: Progress,
                       frac: Callable[[], float]) -> bool:
    """SIGKILL the driver once a batch has written to OUT but is not recorded as committed.

    Spark writes ``offsets/N`` before batch N runs and ``commits/N`` after the sink
    committed it; the write is seen as OUT's high watermark (uncommitted records count)
    growing while N is planned and not committed. False if the input ran out first.
    """
    checkpoint = Checkpoint.at(str(plan.workdir / "checkpoint"))
    watcher = Consumer(logged({"bootstrap.servers": plan.bootstrap, "group.id": "kafka-eos-chaos-watch",
                               "isolation.level": "read_uncommitted"}))
    parts = [TopicPartition(output_topic, p) for p in range(plan.output_partitions)]

    deadline = time.monotonic() + plan.run_timeout
    watching = (-1, 0)  # (batch in flight, OUT's high watermark when it was first seen)
    try:
        while time.monotonic() < deadline:
            if frac() >= 1.0:
                return False
            pipeline.ensure_running()
            planned, committed = checkpoint.latest_batch("offsets"), checkpoint.latest_batch("commits")
            now = high_watermark(watcher, parts) if planned > committed else None
            if now is not None:
                if watching[0] != planned:
                    watching = (planned, now)
                elif now > watching[1]:
                    pipeline.kill(hard=True)
                    return True
            progress(f"run {pipeline.runs}: waiting for a batch in flight", frac())
            time.sleep(0.02)
    finally:
        watcher.close()
    raise TimeoutError(f"no batch was caught in flight within {plan.run_timeout:.0f}s; "
                       f"see {pipeline.log(pipeline.runs)}")


def _bounce(plan: ChaosPlan, pipeline: Pipeline, bounce: str, rng: random.Random) -> None:
    if bounce.startswith("driver"):
        pipeline.kill(hard=bounce == "driver-hard")
    elif bounce == "worker-hard":
        pipeline.kill_workers()
    else:
        cluster = plan.cluster
        if cluster is None:
            raise ValueError("broker bounces need the embedded cluster (plan.cluster)")
        node = rng.choice([n.node_id for n in cluster.nodes])
        if bounce == "broker-hard":
            cluster.kill(node)
        else:
            cluster.stop_node(node)
        time.sleep(rng.uniform(*plan.broker_down_seconds))
        cluster.restart(node)


def drain(plan: ChaosPlan, pipeline: Pipeline, progress: Progress, frac: Callable[[], float]) -> None:
    pipeline.runs += 1
    proc = processes.start(_job_cmd(plan, pipeline.input_topic, pipeline.output_topic, True),
                           pipeline.log(pipeline.runs))
    pipeline.proc = proc
    deadline = time.monotonic() + plan.run_timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            processes.kill_tree(proc.pid)
            raise TimeoutError(f"the final run did not drain the input in {plan.run_timeout:.0f}s")
        progress("final run: draining the input", frac())
        time.sleep(0.5)
    if proc.returncode != 0:
        raise RuntimeError(f"the final run failed (code {proc.returncode}); see {pipeline.log(pipeline.runs)}")
