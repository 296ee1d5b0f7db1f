"""What every shape is made of: a :class:`Scenario` (what runs, what is checked after it),
and the steps and checks the shapes share."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from tests.simulation.invariants import Oracle
from tests.simulation.model.coordinator import SHORT_MAX
from tests.simulation.spark_jobs import BatchJob, loud_partial
from tests.simulation.spark_shapes import StreamQuery
from tests.simulation.world import World


@dataclass
class Scenario:
    main: Callable[[], None]
    finals: Callable[[], None]
    on_rename: Callable[[str, str], None] = lambda src, dst: None
    outcome: Callable[[], str] = lambda: ""


def epochs(w: World, rng: random.Random) -> None:
    """One schedule in four exhausts producer epochs quickly (Kafka: 32766), so producer ids rotate."""
    w.cluster.coordinator.epoch_limit = rng.choice([SHORT_MAX, SHORT_MAX, SHORT_MAX, 7])


def run_cleanup(w: World, oracle: Oracle, sink: Any) -> str:
    """After every fault: an empty df.write on the prefix, re-run up to three times (a user
    re-running a failed job); its recovery finishes what a failed writer decided."""
    w.plan.budget = len(w.plan.injected)
    outcome = ""
    for attempt in range(3):
        job = BatchJob(w, oracle, f"cleanup{attempt}", sink, [], 1, "cleanup")
        job.supervise()
        outcome = job.outcome
        if outcome == "ok":
            break
    return outcome


def cleanup_check(oracle: Oracle, outcome: str) -> None:
    """The clean-up must succeed. Failing with a TransactionLostError (about an earlier
    writer's decided batch: it writes nothing itself) shows that every later writer of the
    prefix fails the same way."""
    if outcome == "ok":
        return
    rule = "lost-forever" if "TransactionLostError" in outcome else "stuck"
    oracle.fail(rule, f"a df.write on the prefix after the faults failed three times: {outcome}")


def check_jobs(w: World, oracle: Oracle, sink: Any, jobs: Sequence[BatchJob], cleanup: str) -> dict:
    """The after-schedule checks of batch jobs on one sink (each job's rows all visible if it
    succeeded, decisions kept, the clean-up's ``cleanup`` outcome); what is visible."""
    visible = sink.visible(w, oracle)
    oracle.check_outputs(visible, {j.label: j.values() for j in jobs}, {j.label: j.outcome == "ok" for j in jobs})
    oracle.check_decided()
    cleanup_check(oracle, cleanup)
    return visible


def check_stream(w: World, oracle: Oracle, q: StreamQuery, jobs: list[BatchJob] = ()) -> None:
    """The after-schedule checks of a query (and of batch jobs writing to its sink)."""
    visible = q.sink.visible(w, oracle)
    expected = {label: {v for v in q.expected() if v.startswith(label + ":")} for label in q.labels()}
    complete = {label: q.outcome == "finished" for label in q.labels()}
    for job in jobs:
        expected[job.label] = job.values()
        complete[job.label] = job.outcome == "ok"
    oracle.check_outputs(visible, expected, complete)
    shown = {v for values in visible.values() for v in values}
    for job in jobs:
        if not loud_partial(job.outcome):
            oracle.check_atomic(job.label, job.values(), shown)
    if q.sink.kind == "kafka":
        oracle.check_decided()
    else:
        oracle.check_file_lost()
    if q.outcome == "stuck":
        oracle.fail("stuck", f"the query failed on each of its restarts; last errors: {q.errors[-2:]}")
    group = q.sink.extra.get("sourceGroupId") if q.sink.kind == "kafka" else None
    if group and q.outcome == "finished":
        held = w.cluster.groups.offsets(group)
        want = {("in", p): n for p, n in enumerate(q.counts)}
        if held != want:
            oracle.fail("progress", f"the source group holds {held}, the query consumed {want}")
