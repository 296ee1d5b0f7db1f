"""What Spark does around a writer, as far as a sink can observe it.

* :class:`Checkpoint`: a streaming query's checkpoint in Spark's layout on a real
  directory (``metadata``, ``offsets/N``, ``commits/N``), so the product reads it as it
  reads Spark's. Log entries are created only if absent (HDFSMetadataLog.add): a second
  driver of the query fails on the entry the first wrote (Spark's "concurrent update").
* :func:`task_context`: a pyspark ``TaskContext`` as a Python worker gets it (partition,
  attempt, local properties such as ``sql.streaming.queryId`` / ``streaming.sql.batchId``).
* :class:`StageRunner`: one write stage, as DAGScheduler, TaskSetManager and
  OutputCommitCoordinator run it: a task per partition; a failed attempt is retried under
  the next attempt number, 4 failures fail the job; a speculative copy runs beside a slow
  attempt and the first attempt to finish wins the partition (the other was pre-committed
  all the same: Spark asks the commit coordinator only after the Python ``write()``
  returned); a stage retry (a FetchFailed) resubmits the unfinished partitions under
  attempt numbers that start at 0 again, while the old attempts keep running and can
  still win (result stages accept any stage attempt's result). A task that stalls (a
  paused executor) comes back whenever the scheduler resumes it, possibly in a later
  batch or a later driver run: a zombie.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import TaskContext
from pyspark.sql.types import StringType, StructField, StructType

from tests.simulation.faults import CRASH, FAIL, SLOW, SPARK, STALL
from tests.simulation.scheduler import Actor, Crash
from tests.simulation.world import World

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
MAX_TASK_FAILURES = 4  # spark.task.maxFailures


class TaskFailure(RuntimeError):
    """An exception in a task (a lost shuffle fetch, a bug in a UDF, an executor OOM)."""


class JobFailed(RuntimeError):
    """A task failed MAX_TASK_FAILURES times; Spark aborts the write with these messages."""

    def __init__(self, message: str, messages: list) -> None:
        super().__init__(message)
        self.messages = messages


class ConcurrentUpdate(RuntimeError):
    """Spark's checkpoint log refused an entry another driver of the query wrote first."""


class Checkpoint:
    def __init__(self, path: Path, query_id: str) -> None:
        self.path = path
        (path / "offsets").mkdir(parents=True, exist_ok=True)
        (path / "commits").mkdir(parents=True, exist_ok=True)
        if not (path / "metadata").exists():
            (path / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
        self.query_id = json.loads((path / "metadata").read_text())["id"]

    def _batches(self, log: str) -> list[int]:
        return sorted(int(p.name) for p in (self.path / log).iterdir() if p.name.isdigit())

    def latest(self, log: str) -> int:
        return max(self._batches(log), default=-1)

    def offsets(self, batch: int) -> list[int] | None:
        path = self.path / "offsets" / str(batch)
        if batch < 0 or not path.exists():
            return None
        ends = json.loads(path.read_text().splitlines()[2])["in"]
        return [ends[str(p)] for p in range(len(ends))]

    def add_offsets(self, batch: int, ends: list[int]) -> None:
        text = "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n" + \
            json.dumps({"in": {str(p): o for p, o in enumerate(ends)}}, sort_keys=True) + "\n"
        self._add("offsets", batch, text)

    def has_commit(self, batch: int) -> bool:
        return (self.path / "commits" / str(batch)).exists()

    def add_commit(self, batch: int) -> None:
        self._add("commits", batch, 'v1\n{"nextBatchWatermarkMs":0}\n')

    def _add(self, log: str, batch: int, text: str) -> None:
        path = self.path / log / str(batch)
        try:
            with open(path, "x") as f:
                f.write(text)
        except FileExistsError:
            raise ConcurrentUpdate(f"{log}/{batch} exists: another driver of the query wrote it") from None


def task_context(partition: int, attempt: int, stage: int, properties: dict) -> TaskContext:
    ctx = object.__new__(TaskContext)
    ctx._partitionId, ctx._attemptNumber, ctx._stageId = partition, attempt, stage
    ctx._taskAttemptId, ctx._localProperties, ctx._cpus = 0, dict(properties), 1
    return ctx


@dataclass
class Attempt:
    actor: Actor
    stage_attempt: int
    partition: int
    attempt: int
    handled: bool = False
    cancelled: bool = False


class StageRunner:
    """One write stage of one job: ``run()`` returns the commit messages (None for a
    partition without one) or raises :class:`JobFailed`."""

    def __init__(self, w: World, name: str, blob: bytes, tasks: list[list[Any]], properties: dict,
                 stage_id: int, owner: Actor) -> None:
        self.w = w
        self.name = name
        self.blob = blob
        self.tasks = tasks
        self.properties = properties
        self.stage_id = stage_id
        self.owner = owner
        self.attempts: list[Attempt] = []
        self.results: dict[int, Any] = {}
        self.failures = {p: 0 for p in range(len(tasks))}
        self.stage_attempt = 0
        self.next_attempt = {p: 0 for p in range(len(tasks))}

    # -- tasks -----------------------------------------------------------------

    def _launch(self, partition: int, why: str) -> None:
        attempt = self.next_attempt[partition]
        self.next_attempt[partition] += 1
        name = f"{self.name}.s{self.stage_attempt}.p{partition}.a{attempt}"
        ctx = task_context(partition, attempt, self.stage_id, self.properties)
        items = self.tasks[partition]
        blob = self.blob
        sched = self.w.sched

        def rows() -> Any:
            for item in items:
                if sched.point("task:row", str(item), (CRASH, STALL, SLOW, FAIL)) is not None:
                    raise TaskFailure("injected task failure")
                yield item

        def body() -> Any:
            writer = pickle.loads(blob)
            return writer.write(rows())

        actor = sched.spawn(name, body, "task", ctx)
        sched.log(f"launch {name} ({why})")
        self.attempts.append(Attempt(actor, self.stage_attempt, partition, attempt))

    def _live(self, partition: int, stage_attempt: int | None = None) -> list[Attempt]:
        return [a for a in self.attempts if a.partition == partition and not a.actor.done and not a.cancelled
                and (stage_attempt is None or a.stage_attempt == stage_attempt)]

    def cancel_all(self, zombie_chance: float = 0.3) -> None:
        """The job ends (failed, or its driver died): running attempts are killed, except
        the ones whose executor does not hear of it in time (zombies)."""
        rng = self.w.sched.rng()
        for a in self.attempts:
            if not a.actor.done and not a.cancelled:
                a.cancelled = True
                if rng.random() >= zombie_chance:
                    self.w.sched.kill(a.actor, "(job over)")
                else:
                    self.w.sched.log(f"{a.actor.name} keeps running (zombie)")

    # -- the stage ---------------------------------------------------------------

    def run(self) -> list[Any]:
        sched = self.w.sched
        for p in range(len(self.tasks)):
            self._launch(p, "first")
        while len(self.results) < len(self.tasks):
            fault = sched.point("spark:stage", f"{self.name} {len(self.results)}/{len(self.tasks)} done",
                                (SPARK, CRASH, STALL, SLOW))
            if fault is not None:
                self._spark_event()
            moved = sched.wait_until(lambda: any(a.actor.done and not a.handled for a in self.attempts), 20.0)
            for a in [a for a in self.attempts if a.actor.done and not a.handled]:
                a.handled = True
                self._finished(a)
            if not moved:
                # Nothing finished for a while: speculation copies a task whose every
                # attempt is stalled (Spark: a task much slower than the others).
                for p in range(len(self.tasks)):
                    live = self._live(p)
                    if p not in self.results and live and all(x.actor.state == "paused" for x in live):
                        self._launch(p, "speculative copy of a stalled task")
        return [self.results.get(p) for p in range(len(self.tasks))]

    def _finished(self, a: Attempt) -> None:
        sched = self.w.sched
        p = a.partition
        if a.actor.error is None:
            if p in self.results or a.cancelled:
                sched.log(f"{a.actor.name}: commit denied (partition {p} already committed)")
                return
            self.results[p] = a.actor.result
            sched.log(f"{a.actor.name}: commit authorized for partition {p}")
            for other in self._live(p):
                # Spark kills the other attempts; the kill reaches some of them too late.
                other.cancelled = True
                if sched.rng().random() >= self.w.tuning.get("late_kill", 0.3):
                    sched.kill(other.actor, "(another attempt succeeded)")
            return
        if a.cancelled or p in self.results:
            return
        self.failures[p] += 1
        kind = "lost" if isinstance(a.actor.error, Crash) else f"failed ({type(a.actor.error).__name__})"
        sched.log(f"{a.actor.name} {kind}; failures of partition {p}: {self.failures[p]}")
        if self.failures[p] >= MAX_TASK_FAILURES:
            self.cancel_all()
            raise JobFailed(f"Task {p} failed {self.failures[p]} times: {a.actor.error!r}",
                            [self.results.get(q) for q in range(len(self.tasks))])
        if not self._live(p, self.stage_attempt):
            self._launch(p, "retry")

    def _spark_event(self) -> None:
        rng = self.w.sched.rng()
        running = [p for p in range(len(self.tasks)) if p not in self.results and self._live(p)]
        missing = [p for p in range(len(self.tasks)) if p not in self.results]
        event = self.w.tuning.get("spark_event") or ("speculation" if running and rng.random() < 0.5 else "stage")
        if event == "speculation" and running:
            p = rng.choice(running)
            self._launch(p, "speculative copy")
            return
        if missing:
            # A FetchFailed: the stage attempt fails; the unfinished partitions run again in
            # a new stage attempt whose attempt numbers start at 0. Old attempts keep running.
            self.stage_attempt += 1
            self.next_attempt = {p: 0 for p in range(len(self.tasks))}
            self.w.sched.log(f"{self.name}: stage attempt {self.stage_attempt} (FetchFailed)")
            for p in missing:
                self._launch(p, f"stage attempt {self.stage_attempt}")
