"""Crash a running exactly-once pipeline again and again, then prove nothing was lost
or duplicated.

One run: seed topic IN with records that carry unique ids, start the pipeline
(:mod:`kafka_eos_ds.demo.job`) as its own driver process, SIGKILL it (with its JVM and
Python workers) at random moments and start it again from the same checkpoint, then
let a final run drain the input (Trigger.AvailableNow) and audit OUT. A tailing
``read_committed`` consumer watches OUT the whole time: it must never see a duplicate
either. Every wait is bounded; the run stops by itself.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_eos_ds.audit import AuditReport, audit
from kafka_eos_ds.demo import processes

Progress = Callable[[str, float], None]


@dataclass
class ChaosPlan:
    bootstrap: str
    workdir: Path
    records: int = 20_000
    input_partitions: int = 2
    output_partitions: int = 3
    crashes: int = 3
    crash_window: tuple[float, float] = (6.0, 18.0)  # seconds after a run starts writing
    max_offsets: int = 2_000
    shuffle: bool = False
    seed: int = 0
    run_timeout: float = 300.0
    replication: int = 1
    sink_options: list[str] = field(default_factory=list)
    on_crash: Optional[Callable[[int], None]] = None  # e.g. bounce a broker too


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

    @property
    def ok(self) -> bool:
        return self.report.ok and self.tail_duplicates == 0


def create_topics(bootstrap: str, names: dict[str, int], replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, p, replication) for n, p in names.items()], operation_timeout=60)
    for future in futures.values():
        future.result(90)


def seed_input(bootstrap: str, topic: str, records: int, keys: int = 64) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, key=f"k{i % keys}".encode(), value=f"{i}|record {i} of the demo".encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 5000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"seeding {topic} did not finish")


def committed_end(bootstrap: str, topic: str) -> int:
    """Sum of read_committed end offsets (markers included: a progress estimate)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-eos-progress",
                         "isolation.level": "read_committed"})
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
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"kafka-eos-tail-{uuid.uuid4().hex}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([self.topic])
        try:
            while not self.stopping.is_set():
                for msg in consumer.consume(1000, 0.5):
                    if msg.error() is None and msg.value() is not None:
                        self.ids[msg.value().split(b"|", 1)[0]] += 1
        finally:
            consumer.close()

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.ids.values() if n > 1)


def _job_cmd(plan: ChaosPlan, input_topic: str, output_topic: str, available_now: bool) -> list[str]:
    cmd = [sys.executable, "-m", "kafka_eos_ds.demo.job", "--bootstrap", plan.bootstrap,
           "--input", input_topic, "--output", output_topic,
           "--checkpoint", str(plan.workdir / "checkpoint"), "--prefix", f"demo-{output_topic}",
           "--max-offsets", str(plan.max_offsets)]
    if available_now:
        cmd.append("--available-now")
    if plan.shuffle:
        cmd.append("--shuffle")
    for option in plan.sink_options:
        cmd += ["--sink-option", option]
    return cmd


def run_chaos(plan: ChaosPlan, progress: Progress = lambda msg, frac: None) -> ChaosResult:
    started = time.monotonic()
    rng = random.Random(plan.seed)
    plan.workdir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    input_topic, output_topic = f"demo-in-{run_id}", f"demo-out-{run_id}"
    create_topics(plan.bootstrap, {input_topic: plan.input_partitions, output_topic: plan.output_partitions},
                  plan.replication)
    progress(f"seeding {plan.records:,} records", 0.0)
    seed_input(plan.bootstrap, input_topic, plan.records)
    tail = TailingReader(plan.bootstrap, output_topic)
    tail.start()
    crashes = runs = 0
    try:
        for crash in range(plan.crashes):
            runs += 1
            proc = processes.start(_job_cmd(plan, input_topic, output_topic, False),
                                   plan.workdir / f"run-{runs}.log")
            base = committed_end(plan.bootstrap, output_topic)
            deadline = time.monotonic() + plan.run_timeout
            # Crash only once this run has written something, at a random moment after.
            while committed_end(plan.bootstrap, output_topic) <= base and time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"the pipeline exited early (code {proc.returncode}); "
                                       f"see {plan.workdir / f'run-{runs}.log'}")
                progress(f"run {runs}: waiting for output", _frac(plan, output_topic))
                time.sleep(0.5)
            crash_at = time.monotonic() + rng.uniform(*plan.crash_window)
            while time.monotonic() < crash_at and proc.poll() is None:
                progress(f"run {runs}: writing, crash {crash + 1}/{plan.crashes} soon", _frac(plan, output_topic))
                time.sleep(0.5)
            victims = processes.kill_tree(proc.pid)
            processes.wait_gone(victims)
            proc.wait(10)
            crashes += 1
            if plan.on_crash is not None:
                plan.on_crash(crash)
            progress(f"run {runs}: driver killed ({len(victims)} processes)", _frac(plan, output_topic))
        runs += 1
        progress("final run: draining the input", _frac(plan, output_topic))
        proc = processes.start(_job_cmd(plan, input_topic, output_topic, True), plan.workdir / f"run-{runs}.log")
        deadline = time.monotonic() + plan.run_timeout
        while proc.poll() is None:
            if time.monotonic() > deadline:
                processes.kill_tree(proc.pid)
                raise TimeoutError(f"the final run did not drain the input in {plan.run_timeout:.0f}s")
            progress("final run: draining the input", _frac(plan, output_topic))
            time.sleep(0.5)
        if proc.returncode != 0:
            raise RuntimeError(f"the final run failed (code {proc.returncode}); see {plan.workdir / f'run-{runs}.log'}")
        progress("auditing", 1.0)
        report = audit({"bootstrap.servers": plan.bootstrap}, input_topic, output_topic)
        time.sleep(2.0)  # let the tailing reader catch up before it stops
    finally:
        tail.stopping.set()
        tail.join(10)
    return ChaosResult(report, crashes, runs, time.monotonic() - started, tail.duplicates,
                       sum(tail.ids.values()), input_topic, output_topic)


def _frac(plan: ChaosPlan, output_topic: str) -> float:
    return min(1.0, committed_end(plan.bootstrap, output_topic) / max(plan.records, 1))
