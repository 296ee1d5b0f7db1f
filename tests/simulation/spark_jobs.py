"""``df.write`` as Spark runs it around a sink (:class:`BatchJob`), and what counts as an
expected failure of a simulated driver (:func:`unexpected`)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from kafka_eos_ds.errors import KafkaEosError, TransactionLostError
from kafka_eos_tools.faults import InjectedFault
from tests.simulation.faults import CRASH, SLOW, STALL
from tests.simulation.invariants import Oracle
from tests.simulation.scheduler import Actor, Crash, StepLimit
from tests.simulation.spark_model import SCHEMA, ConcurrentUpdate, JobFailed, StageRunner, TaskFailure
from tests.simulation.world import World

DRIVER = (CRASH, STALL, SLOW)
EXPECTED_ERRORS = (KafkaEosError, TaskFailure, JobFailed, ConcurrentUpdate, InjectedFault)


def unexpected(oracle: Oracle, who: str, error: BaseException) -> bool:
    """Record an error outside the product's tree (and the simulation's own); True if so."""
    if getattr(error, "_sim_seen", False):
        return True
    if isinstance(error, (Crash, StepLimit) + EXPECTED_ERRORS):
        if isinstance(error, JobFailed) and error.__cause__ is not None:
            return unexpected(oracle, who, error.__cause__)
        return False
    oracle.fail("unexpected-error", f"{who}: {type(error).__name__}: {error}")
    error._sim_seen = True  # type: ignore[attr-defined]
    return True


@dataclass
class BatchJob:
    """``df.write.format(...).mode("append").save()`` of ``rows`` (or of ``tasks`` as given)."""

    w: World
    oracle: Oracle
    name: str
    sink: Any
    rows: list            # (input partition, offset) pairs
    n_tasks: int
    label: str
    properties: dict = field(default_factory=dict)
    tasks: list | None = None
    options: dict = field(default_factory=dict)  # the write's own options (txnAppId, txnVersion)
    outcome: str = "not run"

    def values(self) -> set:
        return {f"{self.label}:{p}:{o}" for p, o in self.rows}

    def _split(self) -> list[list]:
        tasks: list[list] = [[] for _ in range(self.n_tasks)]
        for p, o in self.rows:
            tasks[p % self.n_tasks].append(self.sink.item(self.label, p, o))
        return tasks

    def run(self) -> str:
        """The job's driver (an actor of its own)."""
        me = self.w.sched.current
        assert me is not None
        self.run_in(me)
        return "ok"

    def run_in(self, me: Actor) -> None:
        sched = self.w.sched
        ds = self.sink.data_source(extra=self.options)
        planner = ds.writer(SCHEMA, False)
        sched.point("spark:plan", f"{self.name}: pickle the writer for the tasks", DRIVER)
        blob = pickle.dumps(planner)
        stage = StageRunner(self.w, self.name, blob, self.tasks if self.tasks is not None else self._split(),
                            self.properties, 1, me)
        me.on_death.append(stage.cancel_all)
        try:
            messages = stage.run()
        except JobFailed as exc:
            self._abort(blob, exc.messages)
            raise
        sched.point("spark:commit", f"{self.name}: the planner's writer commits", DRIVER)
        try:
            pickle.loads(blob).commit(messages)
        except Exception:
            self._abort(blob, messages)
            raise

    def _abort(self, blob: bytes, messages: list) -> None:
        self.w.sched.point("spark:abort", f"{self.name}: the planner's writer aborts", DRIVER)
        try:
            pickle.loads(blob).abort(messages)
        except Exception as exc:
            unexpected(self.oracle, "abort", exc)
            self.w.sched.log(f"abort failed: {type(exc).__name__}: {exc}")

    def supervise(self) -> None:
        """Run the job once (nobody retries a df.write) and record how it ended; a driver
        that stalls is waited for (the job's caller waits for its answer)."""
        sched = self.w.sched
        actor = sched.spawn(self.name, self.run, "driver")
        sched.wait_until(lambda: actor.done)
        if actor.error is None:
            self.outcome = "ok"
            return
        unexpected(self.oracle, actor.name, actor.error)
        if isinstance(actor.error, TransactionLostError):
            self.oracle.lost_claim(actor.error)
        self.oracle.unknown_claim(actor.error)
        self.outcome = f"failed: {type(actor.error).__name__}"
        if "Cannot tell whether" in str(actor.error):
            # Loud by design: the operator is told to look at the output (never a guess).
            self.outcome += " (cannot tell)"


def loud_partial(outcome: str) -> bool:
    """A job that stopped loudly with part of its output possibly committed: a
    TransactionLostError, or an outcome that can no longer be told."""
    return "TransactionLostError" in outcome or "(cannot tell)" in outcome
