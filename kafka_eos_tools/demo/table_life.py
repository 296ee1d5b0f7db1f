"""A Kafka-to-table pipeline's life, as users live it: two pipelines writing one
partitioned Hive table on HDFS or S3 (``LifePlan.store``), their drivers SIGKILLed again and again, a retention job
dropping old partitions beside them, the first pipeline's checkpoint replaced twice
(``startingOffsetsFromTable``), and the table audited through the metastore and over its
path (:mod:`.table_audit`).

1. Pipelines 1 and 2 (:mod:`.table_chaos`'s pipeline, each its own input topic, checkpoint
   and query; pipeline 2's ids start at :data:`SECOND_IDS`) run side by side, each driver
   SIGKILLed ``crashes`` times at a random (seeded) moment after its run committed a batch
   of its own, and restarted. The inputs are fed meanwhile; their record timestamps rise an
   hour every ``per_hour`` records of an input, so the table spans many hours.
2. A retention job (:mod:`.retention`) drops the hours ``keep_hours`` behind the newest,
   once no input record can map to them any more, the whole time.
3. Pipeline 2 drains its input from its checkpoint. Pipeline 1's last run dies right after
   a batch's decision (an injected fault): a dead query whose decided batch nobody recorded
   done.
4. Query A, pipeline 1 on a new checkpoint with ``startingOffsetsFromTable``, drains the
   rest of input 1 and more records in later hours: its first batch finishes the dead
   query's batch (docs/file-sink.md, "When the checkpoint is lost").
5. Retention sweeps again: the partitions holding the dead query's decided batch are
   dropped (checked by their files' names).
6. Query B, on another new checkpoint with ``startingOffsetsFromTable``, must start over
   that table (not fail on the deleted files, not publish the dropped partitions again) and
   write more records once.

The audit: every input id of both pipelines in the table once or removed by retention
once, never both; no dropped partition back; no staged file left; every partition with
files registered once.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import kafka_eos_ds
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_tools import faults
from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.demo.chaos import InputFeeder, Pipeline, Progress, create_topics, drain, seed_input
from kafka_eos_tools.demo.retention import HOUR_MS, Retention, WatchedInput
from kafka_eos_tools.demo.table_chaos import (
    DATABASE,
    CommittedInput,
    TablePlan,
    audit_table,
    create_database,
    table_pipeline,
)

# Every driver logs at DEBUG (the sink's decisions, each S3 completion and delete): a loss
# in a life this long is diagnosed from the first run that shows it.
DRIVER_ENV = {**os.environ, kafka_eos_ds.LOG_LEVEL_VARIABLE: "DEBUG"}
SECOND_IDS = 1_000_000  # pipeline 2's first id: the two inputs' ids never meet in the table
KEYS = 64  # the feeder's keys, k0..k63 (seed_input's default too)


@dataclass
class LifePlan(TablePlan):
    records: int = 3000  # the least input of each pipeline before the new queries; more while kills remain
    crashes: int = 3  # SIGKILLs of each pipeline's driver
    buckets: int = 2
    max_offsets: int = 300
    per_hour: int = 200  # records of one input per hour of timestamps
    keep_hours: int = 2
    kill_window: tuple[float, float] = (3.0, 12.0)


@dataclass
class LifeResult:
    audit: table_audit.TableAudit
    records_in: dict[int, int]  # per pipeline (1: all three queries' input)
    kills: dict[int, int]
    runs: int
    dropped: int
    removed_ids: int
    dead_batch: int
    dead_files_dropped: list[str]  # the dead query's decided batch's files retention deleted
    seconds: float
    logs: Path
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.audit.ok and bool(self.dead_files_dropped)

    def summary(self) -> str:
        m = self.audit.metastore.report
        return (f"table life: records in {self.records_in[1]:,} (pipeline 1) + {self.records_in[2]:,} (pipeline 2), "
                f"kills {self.kills[1]}+{self.kills[2]}, runs {self.runs}, partitions dropped {self.dropped}, "
                f"ids removed by retention {self.removed_ids:,}, duplicates {m.duplicates}, losses {m.losses}, "
                f"dropped back {len(self.audit.dropped_back)}, staged left {len(self.audit.staged_left)}, "
                f"dead batch {self.dead_batch} files dropped {len(self.dead_files_dropped)}, "
                f"{self.seconds:.0f}s")


def stamps(base_ms: int, per_hour: int):
    """Record id -> timestamp: ``per_hour`` records an hour from ``base_ms``, for each input
    alike (ids taken apart by :data:`SECOND_IDS`), rising with the id."""
    def timestamp_of(record_id: int) -> int:
        n = record_id % SECOND_IDS
        return base_ms + (n // per_hour) * HOUR_MS + (n % per_hour) * (HOUR_MS // per_hour)

    return timestamp_of


class Lane:
    """One pipeline: its input, feeder, driver and kills."""

    def __init__(self, number: int, plan: LifePlan, topic: str, table: str, location: str, timestamp_of) -> None:
        self.number, self.topic = number, topic
        self.first = 0 if number == 1 else SECOND_IDS
        self.chaos = table_pipeline(plan, plan.workdir / f"pipeline-{number}", table, location)
        self.chaos.workdir.mkdir(parents=True, exist_ok=True)
        self.committed = CommittedInput(self.chaos.workdir / "checkpoint")
        self.feeder = InputFeeder(plan.bootstrap, topic, plan.records, 3 * plan.max_offsets, self.committed.records,
                                  keys=KEYS, first=self.first, timestamp_of=timestamp_of)
        self.pipeline = Pipeline(self.chaos, topic, f"table-{number}", DRIVER_ENV)
        self.watched = WatchedInput(topic, 2, [self.chaos.workdir / "checkpoint"])
        self.kills = 0
        self.base_batch = -1  # the newest committed batch when the running driver started
        self.kill_at: float | None = None

    def step(self, plan: LifePlan, rng: random.Random) -> None:
        """Keep the driver running; schedule its next kill once its run committed a batch of
        its own (a kill before that only repeats the start-up), and kill it when due."""
        self.pipeline.ensure_running()
        if self.kills >= plan.crashes:
            return
        now = time.monotonic()
        if self.kill_at is None and self.committed.batch() > self.base_batch:
            self.kill_at = now + rng.uniform(*plan.kill_window)
        if self.kill_at is not None and now >= self.kill_at:
            self.pipeline.kill(hard=True)
            self.kills += 1
            self.kill_at, self.base_batch = None, self.committed.batch()


def run_table_life(plan: LifePlan, progress: Progress = lambda msg, frac: None) -> LifeResult:
    started = time.monotonic()
    rng = random.Random(plan.seed)
    plan.workdir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    table = f"life_{run_id}"
    location = f"{plan.store}/kafka-eos-demo/{DATABASE}.db/{table}"
    topics = {1: f"life-in1-{run_id}", 2: f"life-in2-{run_id}"}
    create_topics(plan.bootstrap, {t: 2 for t in topics.values()}, plan.replication)
    create_database(plan.metastore, DATABASE, f"{plan.store}/kafka-eos-demo/{DATABASE}.db")
    # Three days back, whole hours: well inside the topics' time retention (seven days by
    # default), and never in the future, which brokers may refuse.
    base_ms = (int(time.time() * 1000) // HOUR_MS - 72) * HOUR_MS
    timestamp_of = stamps(base_ms, plan.per_hour)
    lanes = [Lane(n, plan, topics[n], table, location, timestamp_of) for n in (1, 2)]
    one, two = lanes
    retention = Retention(plan.bootstrap, location, plan.store_options, plan.metastore, DATABASE, table,
                          [lane.watched for lane in lanes], plan.keep_hours)
    pipelines = [lane.pipeline for lane in lanes]  # every driver started, to stop at the end
    dead, new_queries = 0, []
    try:
        for lane in lanes:
            lane.feeder.start()
        retention.start()
        _chaos(plan, lanes, retention, rng, progress)
        # Pipeline 2 drains its input from its own checkpoint.
        two.pipeline.kill(hard=False)
        two.feeder.finish()
        progress("pipeline 2: draining", 0.6)
        drain(two.chaos, two.pipeline, progress, lambda: 0.6)
        two.watched.closed = True
        # Pipeline 1: the rest of its input and more in later hours, for the dead batch and
        # query A; its last run dies right after a batch's decision.
        one.pipeline.kill(hard=False)
        fed = one.feeder.finish()
        later = (plan.keep_hours + 3) * plan.per_hour + plan.max_offsets
        seed_input(plan.bootstrap, one.topic, later, KEYS, fed, timestamp_of)
        fed += later
        one.watched.closed = True
        dead = _die_after_a_decision(plan, one, pipelines, progress)
        # Query A: a new checkpoint, resumed from the table.
        query_a = _new_query(plan, one, "a", table, location, pipelines)
        new_queries.append(query_a)
        progress("query A (startingOffsetsFromTable): draining", 0.8)
        drain(query_a.plan, query_a, progress, lambda: 0.8)
        retention.stop()
        retention.sweep_now()
        token = _query_token(one.chaos.workdir / "checkpoint")
        dead_files = [f for f in retention.removed_files
                      if os.path.basename(f).startswith(f"part-{dead:05d}-") and token in os.path.basename(f)]
        # Query B: another new checkpoint over the table retention thinned, with new records.
        one.watched.closed = False
        more = plan.per_hour
        seed_input(plan.bootstrap, one.topic, more, KEYS, fed, timestamp_of)
        fed += more
        one.watched.closed = True
        query_b = _new_query(plan, one, "b", table, location, pipelines)
        new_queries.append(query_b)
        progress("query B (startingOffsetsFromTable): draining", 0.9)
        drain(query_b.plan, query_b, progress, lambda: 0.9)
        progress("auditing through the metastore and over the path", 1.0)
        audit = audit_table(plan, list(topics.values()), table, location, retention.removed, retention.dropped)
        # Dropped partitions found registered again during the run count as back too.
        audit.dropped_back = sorted(set(audit.dropped_back) | set(retention.back))
        audit.late_files = list(retention.late_files)
        records_in = {1: fed, 2: two.feeder.fed}
    finally:
        for lane in lanes:
            lane.feeder.finishing.set()
        retention.stopping.set()
        for pipeline in pipelines:
            pipeline.kill(hard=True)
        retention.join(60)  # its pass under way ends before the servers stop
        (plan.workdir / "retention.log").write_text("\n".join(retention.journal) + "\n")
    runs = sum(p.runs for p in [one.pipeline, two.pipeline, *new_queries])
    return LifeResult(audit, records_in, {lane.number: lane.kills for lane in lanes}, runs, len(retention.dropped),
                      len(retention.removed), dead, dead_files, time.monotonic() - started, plan.workdir)


def _chaos(plan: LifePlan, lanes: list[Lane], retention: Retention, rng: random.Random, progress: Progress) -> None:
    """Both pipelines run, each killed ``plan.crashes`` times; bounded by ``run_timeout``
    per kill."""
    deadline = time.monotonic() + plan.run_timeout * (plan.crashes + 1)
    while any(lane.kills < plan.crashes for lane in lanes):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the kills did not happen in time; logs in {plan.workdir}")
        if retention.error is not None or not retention.is_alive():
            retention.stop()  # raises the retention job's error
        for lane in lanes:
            lane.step(plan, rng)
        progress(f"kills {lanes[0].kills}+{lanes[1].kills} of {plan.crashes} each, "
                 f"{len(retention.dropped)} partitions dropped", 0.3)
        time.sleep(0.5)


def _die_after_a_decision(plan: LifePlan, lane: Lane, pipelines: list[Pipeline], progress: Progress) -> int:
    """Run pipeline 1 once more with a fault that kills its driver right after a batch's
    decision; the batch it leaves decided and never done."""
    env = {**DRIVER_ENV, **faults.environment("driver-after-decision")}
    dying = Pipeline(lane.chaos, lane.topic, f"table-{lane.number}", env)
    dying.runs = lane.pipeline.runs
    pipelines.append(dying)
    dying.ensure_running()
    assert dying.proc is not None
    deadline = time.monotonic() + plan.run_timeout
    while dying.proc.poll() is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fault after a decision did not fire; see {dying.log(dying.runs)}")
        progress("pipeline 1: a run that dies after a decision", 0.7)
        time.sleep(0.5)
    dying.killed = True
    lane.pipeline.runs = dying.runs  # the lane's run count goes on from the dying run
    if dying.proc.returncode != -9:
        raise RuntimeError(f"pipeline 1's last run ended with {dying.proc.returncode}, not killed after a decision; "
                           f"see {dying.log(dying.runs)}")
    checkpoint = Checkpoint.at(str(lane.chaos.workdir / "checkpoint"))
    batch = checkpoint.latest_batch("offsets")
    if checkpoint.latest_batch("commits") >= batch:
        raise RuntimeError(f"pipeline 1's last run left no batch undone; see {dying.log(dying.runs)}")
    return batch


def _new_query(plan: LifePlan, lane: Lane, name: str, table: str, location: str, pipelines: list[Pipeline]
               ) -> Pipeline:
    """Pipeline 1 on a new checkpoint that starts where the table ends."""
    chaos = table_pipeline(plan, plan.workdir / f"pipeline-{lane.number}{name}", table, location,
                           ["--resume-from-table", location])
    chaos.workdir.mkdir(parents=True, exist_ok=True)
    lane.watched.checkpoints.append(chaos.workdir / "checkpoint")
    query = Pipeline(chaos, lane.topic, f"table-{lane.number}", DRIVER_ENV)
    pipelines.append(query)
    return query


def _query_token(checkpoint: Path) -> str:
    from kafka_eos_ds.table_sink.layout import query_token

    return query_token(Checkpoint.at(str(checkpoint)).query_id())

