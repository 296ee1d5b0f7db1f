"""Spark's call shapes around the sink, driven against the real writers.

A streaming query (:class:`StreamQuery`) runs as Spark's MicroBatchExecution does: on
each start it re-runs the last batch of the offset log that has no commit-log entry,
with the same offsets, else plans the next; per batch the planner builds the writer
(``streamWriter()``) and pickles it for the tasks (the sink's recovery runs there), the
tasks write, and a *fresh* writer's ``commit(messages, batch)`` runs (or ``abort`` with
the same messages when the job or the commit failed); then ``commits/N``. Every job of a
driver run carries Spark's local properties (the query id, the micro-batch id, and the
run id, a new one per start, in the job description and the job group). With
``foreach_writes`` the query is ``foreachBatch`` instead: its function runs that many
``df.write`` jobs per micro-batch; classic ``foreachBatch`` runs them with the stream's
local properties, Spark Connect's (``foreach="connect"``) without them, so each write
names itself with ``txnAppId``/``txnVersion`` (the micro-batch id).

The query's supervisor (the user, or a cluster manager) restarts a failed or crashed
driver after a delay, with a new number of write tasks; a driver that stalled is
presumed dead after its heartbeat timeout and replaced, and comes back later (a zombie
driver). A batch job (:class:`BatchJob`) is ``df.write``: the planner's pickled writer
commits or aborts (on an unpickled copy, as PySpark's commit worker does); nobody
restarts it, unless the user does (a ``txnAppId`` write run again).
"""

from __future__ import annotations

import pickle
import shutil
from dataclasses import dataclass, field
from typing import Any

from kafka_eos_ds.errors import KafkaEosError, TransactionLostError
from kafka_eos_ds.twophase.identity import Kind, WriteId
from tests.simulation.invariants import Oracle
from tests.simulation.scheduler import Actor
from tests.simulation.spark_jobs import DRIVER, BatchJob, unexpected
from tests.simulation.spark_model import SCHEMA, Checkpoint, JobFailed, StageRunner
from tests.simulation.world import World

MAX_RUNS = 14  # driver runs of a query before it counts as stuck


@dataclass
class StreamQuery:
    w: World
    oracle: Oracle
    name: str
    sink: Any
    counts: list               # input records per input partition
    max_per_trigger: int
    foreach_writes: int = 0    # > 0: foreachBatch running that many df.write per micro-batch
    foreach: str = "classic"   # classic (the stream's local properties reach the writes) | connect
    label: str = ""            # the outputs' label (default: the name)
    start: list | None = None  # where the first batch starts (startingOffsets); default 0
    tasks: int | None = None   # write tasks per batch (default: drawn per driver run)
    plans: tuple = ()          # write tasks of each driver run in turn (the source's plan); then as above
    outcome: str = "running"   # finished | loud | stuck | error
    errors: list = field(default_factory=list)
    loud: dict = field(default_factory=dict)
    stage_ids: int = 0
    run_no: int = 0
    delays: tuple = (0.05, 0.5, 2.0, 10.0, 45.0, 130.0)  # seconds before a restart, drawn per restart
    check_leftovers: bool = True  # the left-open rule when the query finishes

    def __post_init__(self) -> None:
        self.label = self.label or self.name
        self.query_id = str(self.w.uuid4())
        self.checkpoint = Checkpoint(self.w.root / f"checkpoint-{self.name}", self.query_id)
        self.run_id = ""

    def labels(self) -> list[str]:
        return [f"{self.label}.fb{j}" for j in range(self.foreach_writes)] if self.foreach_writes else [self.label]

    def expected(self) -> set:
        first = self.start or [0] * len(self.counts)
        return {f"{label}:{p}:{o}" for label in self.labels() for p, n in enumerate(self.counts)
                for o in range(first[p], n)}

    # -- the supervisor ---------------------------------------------------------------

    def supervise(self, runs: int = MAX_RUNS) -> None:
        """Start driver runs (at most ``runs`` more) until the query finishes or stops loudly."""
        sched = self.w.sched
        for _ in range(runs):
            if self.outcome != "running" or self.run_no >= MAX_RUNS:
                break
            run = self.run_no
            self.run_no += 1
            if run:
                sched.sleep(sched.rng().choice(self.delays))
            actor = sched.spawn(f"{self.name}.r{run}", lambda run=run: self.driver_run(run), "driver")
            sched.wait_until(lambda actor=actor: actor.done or actor.state == "paused")
            if not actor.done:
                sched.log(f"{actor.name} stopped answering: presumed dead (it may come back: a zombie driver)")
                sched.sleep(10.0)
            elif actor.error is None:
                self.outcome = "finished"
                self.on_finished(actor.name)
            else:
                self._failed(actor)
        if self.outcome == "running" and self.run_no >= MAX_RUNS:
            self.outcome = "stuck"

    def _failed(self, actor: Actor) -> None:
        error = actor.error
        assert error is not None
        self.errors.append(f"{type(error).__name__}: {error}")
        if unexpected(self.oracle, actor.name, error):
            self.outcome = "error"
            return
        if isinstance(error, TransactionLostError):
            self.oracle.lost_claim(error)
        self.oracle.unknown_claim(error)
        if isinstance(error, KafkaEosError) and not error.retriable:
            # The error's head, long enough to name the batch or write it concerns: two
            # failures of different writes (txnVersion 0, then 1) are not one error twice.
            key = f"{type(error).__name__}: {str(error)[:120]}"
            self.loud[key] = self.loud.get(key, 0) + 1
            if self.loud[key] >= 2:  # the same on two restarts: it fails every time
                self.outcome = "loud"

    def without_checkpoint(self, name: str) -> "StreamQuery":
        """The checkpoint is lost: this query is stopped for good (its drivers too, even a
        stalled one: nobody starts a second query while the first may still run; its tasks
        may linger), and a new query (new id, new checkpoint, same outputs) starts from the
        source group's offsets (startingOffsets=group; earliest where it has none), read as
        a read_committed consumer's committed() reads them: stable, waiting while a
        transaction carrying them is still open."""
        sched = self.w.sched
        for actor in sched.actors:
            if actor.kind == "driver" and actor.name.startswith(self.name + ".r"):
                sched.kill(actor, "(the old query is stopped)")
        shutil.rmtree(self.checkpoint.path)
        group = self.sink.extra.get("sourceGroupId", "")
        while not self.w.cluster.groups.stable(group):
            sched.sleep(1.0)  # the consumer retries; the broker's timeout ends an abandoned transaction
        held = self.w.cluster.groups.offsets(group)
        start = [held.get(("in", p), 0) for p in range(len(self.counts))]
        sched.log(f"the checkpoint of {self.name} is lost; a new query starts from the group's offsets {start}")
        return StreamQuery(self.w, self.oracle, name, self.sink, self.counts, self.max_per_trigger, label=self.label,
                           start=start, tasks=self.tasks)

    def on_finished(self, run: str) -> None:
        if getattr(self.sink, "kind", "") != "kafka" or not self.check_leftovers:
            return
        if not self.foreach_writes:
            self.oracle.check_no_leftovers(run, self.sink.prefix)
        elif self.foreach == "classic":
            writer = WriteId(Kind.FOREACH, self.query_id, 0, run="")
            self.oracle.check_no_leftovers(run, self.sink.prefix, writer.families, writer.writer)

    # -- one driver run ----------------------------------------------------------------

    def driver_run(self, run: int) -> str:
        sched, ck = self.w.sched, self.checkpoint
        n_tasks = self.plans[run] if run < len(self.plans) else \
            self.tasks or sched.rng().randint(1, len(self.counts))
        me = sched.current
        assert me is not None
        run_id = str(self.w.uuid4())  # StreamExecution's runId: new on every start
        self.run_id = run_id
        sched.point("spark:start", f"{self.name} run {run} (runId {run_id[:8]}): {n_tasks} write task(s)", DRIVER)
        batch = ck.latest("offsets")
        if batch < 0 or ck.has_commit(batch):
            batch += 1
            if not self._plan(batch):
                return "finished"
        while True:
            self._run_batch(batch, n_tasks, me, run_id)
            sched.point("spark:commit-log", f"commits/{batch}", DRIVER)
            ck.add_commit(batch)
            batch += 1
            if not self._plan(batch):
                return "finished"

    def _starts(self, batch: int) -> list[int]:
        """Where batch ``batch`` starts: the previous batch's end, or the query's start."""
        return self.checkpoint.offsets(batch - 1) or list(self.start or [0] * len(self.counts))

    def _plan(self, batch: int) -> bool:
        starts = self._starts(batch)
        ends = [min(s + self.max_per_trigger, n) for s, n in zip(starts, self.counts, strict=True)]
        # A fresh query (no offset log) runs batch 0 even with no new input: Spark has no
        # committed offsets to compare with (MicroBatchExecution.isNewDataAvailable), and
        # that batch's planner runs the sink's recovery.
        if ends == starts and batch > 0:
            return False
        self.w.sched.point("spark:offset-log", f"offsets/{batch} = {ends}", DRIVER)
        self.checkpoint.add_offsets(batch, ends)
        return True

    def _tasks(self, label: str, batch: int, n_tasks: int) -> list[list]:
        starts = self._starts(batch)
        ends = self.checkpoint.offsets(batch)
        assert ends is not None
        tasks: list[list] = [[] for _ in range(n_tasks)]
        for p, (s, e) in enumerate(zip(starts, ends, strict=True)):
            # Each input partition stays in one task, so its outputs keep their order.
            tasks[p % n_tasks] += [self.sink.item(label, p, o) for o in range(s, e)]
        return tasks

    def properties(self, batch: int, run_id: str) -> dict:
        """The local properties of every job the stream runs for micro-batch ``batch``
        (MicroBatchExecution: the query and batch ids; StreamExecution: the job group and
        the description, both naming the run)."""
        return {"sql.streaming.queryId": self.query_id, "streaming.sql.batchId": str(batch),
                "spark.jobGroup.id": run_id,
                "spark.job.description": f"{self.name}\nid = {self.query_id}\nrunId = {run_id}\nbatch = {batch}"}

    def _run_batch(self, batch: int, n_tasks: int, me: Actor, run_id: str) -> None:
        props = self.properties(batch, run_id)
        if self.foreach_writes:
            for j, label in enumerate(self.labels()):
                own, extra = props, {}
                if self.foreach == "connect":  # Spark Connect: the writes run without the stream's properties
                    own, extra = {}, {"txnAppId": f"{self.name}-w{j}", "txnVersion": str(batch)}
                BatchJob(self.w, self.oracle, f"{me.name}.b{batch}.w{j}", self.sink, [], n_tasks, label,
                         own, tasks=self._tasks(label, batch, n_tasks), options=extra).run_in(me)
            return
        ds = self.sink.data_source(checkpoint=str(self.checkpoint.path))
        planner = ds.streamWriter(SCHEMA, False)
        self.w.sched.point("spark:plan", f"batch {batch}: pickle the writer for the tasks", DRIVER)
        blob = pickle.dumps(planner)
        self.stage_ids += 1
        stage = StageRunner(self.w, f"{me.name}.b{batch}", blob, self._tasks(self.label, batch, n_tasks), props,
                            self.stage_ids, me)
        me.on_death.append(stage.cancel_all)
        try:
            messages = stage.run()
        except JobFailed as exc:
            self._abort(ds, exc.messages, batch)
            raise
        self.w.sched.point("spark:commit", f"batch {batch}: a fresh writer commits", DRIVER)
        try:
            ds.streamWriter(SCHEMA, False).commit(messages, batch)
        except Exception:
            self._abort(ds, messages, batch)
            raise

    def _abort(self, ds: Any, messages: list, batch: int) -> None:
        self.w.sched.point("spark:abort", f"batch {batch}: a fresh writer aborts", DRIVER)
        try:
            ds.streamWriter(SCHEMA, False).abort(messages, batch)
        except Exception as exc:  # Spark logs it and rethrows the original failure
            unexpected(self.oracle, "abort", exc)
            self.w.sched.log(f"abort failed: {type(exc).__name__}: {exc}")
