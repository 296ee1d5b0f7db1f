"""Directed schedules of a streaming query whose source plans another number of tasks
after a restart (another core count, another 'targetPartitions', partitions added): the
sink's transactional ids are numbered by Spark task, so a batch decided under one plan is
finished under another, whose tasks may not reach the ids of the first (the table of all
directed schedules: :mod:`.directed`)."""

from __future__ import annotations

import random

from tests.simulation.faults import CRASH, Fault
from tests.simulation.invariants import Oracle
from tests.simulation.scenario import Scenario, check_stream
from tests.simulation.sinks import KafkaSink
from tests.simulation.spark_shapes import StreamQuery
from tests.simulation.world import World


def _query(w: World, oracle: Oracle, plans: tuple) -> StreamQuery:
    sink = KafkaSink(out_partitions=1)
    sink.setup(w, oracle)
    q = StreamQuery(w, oracle, "q", sink, [2, 2, 2, 2], 1, plans=plans)
    q.delays = (0.5,)  # back well within the transaction timeout: the restart finishes the batch
    return q


def plan_shrinks_after_first_commit(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """Batch 0 runs as 4 tasks (ids 0..3); the driver dies after committing its first
    transaction (crash point 3); the restart plans 1 task, whose id is 0 only: its
    recovery must commit the decided ids 1..3 it no longer writes with."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-first-commit", 1, CRASH)]
    q = _query(w, oracle, (4, 1))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def plan_shrinks_before_decision(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """Batch 0's 4 tasks pre-commit; the driver dies before the decision; the restart plans
    2 tasks: the leftover ids 2 and 3 (no task of the new plan re-opens them) must be
    aborted, not left open to hold back read_committed readers."""
    w.plan.script = [Fault("q.r0", "fault:driver-before-decision", 1, CRASH)]
    q = _query(w, oracle, (4, 2))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def plan_grows_after_decision(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """Batch 0 runs as 1 task; the driver dies right after its decision; the restart plans 4
    tasks, which re-open id 0 in later batches only after the recovery committed it."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-decision", 1, CRASH)]
    q = _query(w, oracle, (1, 4))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)
