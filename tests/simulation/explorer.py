"""Seeded exploration: build a shape's scenario from a seed, run it, check it, shrink a
failing schedule, and report.

A *schedule* is (shape, seed, faults): the seed fixes the scenario (input sizes, task
counts, sinks) and every interleaving choice; the faults are drawn at random the first
time and recorded. A failing schedule is replayed with its recorded faults only, and
shrunk by dropping faults one at a time while the same rule still breaks.
"""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from tests.simulation import seams
from tests.simulation.invariants import Oracle, Violation
from tests.simulation.scheduler import Crash, Fault, FaultPlan
from tests.simulation.sinks import FileSink, KafkaSink, other_sink
from tests.simulation.spark_shapes import BatchJob, StreamQuery, unexpected
from tests.simulation.world import World

# Violations today's code is known to produce, by shape: the assertion is expected to
# fail until the defect is fixed (the pytest gate marks these shapes xfail, strict).
KNOWN_DEFECTS = {
    "foreach-batch": ({"lost"}, "a df.write inside foreachBatch commits under the stream's first batch id: every "
                                "later write is a silent no-op and its rows are lost"),
}


@dataclass
class Scenario:
    main: Callable[[], None]
    finals: Callable[[], None]
    on_rename: Callable[[str, str], None] = lambda src, dst: None
    outcome: Callable[[], str] = lambda: ""


def _stream(w: World, oracle: Oracle, rng: random.Random, *, file: bool = False, shared_log: bool = False,
            jobs: int = 0, foreach: int = 0) -> Scenario:
    sink: Any = FileSink(w.root / "out") if file else KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]
    progress = not file and not foreach and rng.random() < 0.4
    if progress:
        sink.extra["sourceGroupId"] = "source-group"
    q = StreamQuery(w, oracle, "q", sink, counts, rng.randint(1, 3), foreach_writes=foreach)
    batch_jobs = [BatchJob(w, oracle, f"job{i}", sink, [(p, o) for p in range(2) for o in range(rng.randint(1, 3))],
                           rng.randint(1, 2), f"job{i}") for i in range(jobs)]
    if shared_log:
        w.cluster.create_topic(sink.commit_log, 1)

    def main() -> None:
        sched = w.sched
        if shared_log:
            sched.spawn("other", lambda: other_sink(w, sink.commit_log, rng.randint(2, 5)), "other")
        for job in batch_jobs:
            start = rng.uniform(0, 20)

            def run(job: BatchJob = job, start: float = start) -> None:
                sched.sleep(start)
                job.supervise()

            sched.spawn(f"{job.name}.user", run, "user")
        q.supervise()

    def finals() -> None:
        visible = sink.visible(w, oracle)
        expected = {label: {v for v in q.expected() if v.startswith(label + ":")} for label in q.labels()}
        complete = {label: q.outcome == "finished" for label in q.labels()}
        for job in batch_jobs:
            expected[job.label] = job.values()
            complete[job.label] = job.outcome == "ok"
        oracle.check_outputs(visible, expected, complete)
        shown = {v for values in visible.values() for v in values}
        for job in batch_jobs:
            if "TransactionLostError" not in job.outcome:  # a loud partial outcome
                oracle.check_atomic(job.label, job.values(), shown)
        if not file:
            oracle.check_decided()
        if q.outcome == "stuck":
            oracle.fail("stuck", f"the query failed on each of its restarts; last errors: {q.errors[-2:]}")
        if progress and q.outcome == "finished":
            group = {tp: o for tp, o in w.cluster.groups.offsets("source-group").items()}
            want = {("in", p): n for p, n in enumerate(counts)}
            if group != want:
                oracle.fail("progress", f"the source group holds {group}, the query consumed {want}")

    def on_rename(src: str, dst: str) -> None:
        if file:
            oracle.file_final_rename(sink.path, src, dst)

    return Scenario(main, finals, on_rename, lambda: q.outcome)


def _batch(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    sink = KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    jobs = [BatchJob(w, oracle, f"job{i}", sink, [(p, o) for p in range(rng.randint(1, 3))
                                                  for o in range(rng.randint(1, 3))], rng.randint(1, 3), f"job{i}")
            for i in range(rng.randint(2, 3))]
    # A last empty job on the prefix: its recovery finishes what a failed job decided.
    cleanup = BatchJob(w, oracle, "cleanup", sink, [], 1, "cleanup")

    def main() -> None:
        sched = w.sched
        concurrent = rng.random() < 0.4
        users = []
        for job in jobs:
            if concurrent:
                users.append(sched.spawn(f"{job.name}.user", job.supervise, "user"))
            else:
                job.supervise()
        sched.wait_until(lambda: all(u.done for u in users))
        w.plan.budget = len(w.plan.injected)  # no fault in the clean-up
        cleanup.supervise()

    def finals() -> None:
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {j.label: j.values() for j in jobs}, {j.label: j.outcome == "ok" for j in jobs})
        shown = {v for values in visible.values() for v in values}
        for job in jobs:
            if "TransactionLostError" not in job.outcome:  # a loud partial outcome
                oracle.check_atomic(job.label, job.values(), shown)
        oracle.check_decided()
        if cleanup.outcome != "ok":
            oracle.fail("stuck", f"a clean job on the prefix after the faults failed: {cleanup.outcome}")

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs))


SHAPES: dict[str, Callable[[World, Oracle, random.Random], Scenario]] = {
    "stream": lambda w, o, r: _stream(w, o, r),
    "stream-file": lambda w, o, r: _stream(w, o, r, file=True),
    "stream-shared-log": lambda w, o, r: _stream(w, o, r, shared_log=True),
    "stream-and-batch": lambda w, o, r: _stream(w, o, r, jobs=r.randint(1, 2)),
    "batch": _batch,
    "foreach-batch": lambda w, o, r: _stream(w, o, r, foreach=2),
}


@dataclass
class Result:
    shape: str
    seed: int
    steps: int
    faults: list
    violations: list
    outcome: str
    trace: list = field(repr=False, default_factory=list)
    seconds: float = 0.0

    @property
    def rules(self) -> set:
        return {v.rule for v in self.violations}


def run_one(shape: str, seed: int, script: Optional[list] = None, *, rate: float = 0.02,
            budget: int = 4, max_steps: int = 20_000) -> Result:
    started = time.perf_counter()
    plan = FaultPlan(rate=rate, budget=budget, script=script)
    with tempfile.TemporaryDirectory(prefix="kafka-eos-sim-") as tmp:
        w = World(seed, plan, Path(tmp), max_steps=max_steps)
        oracle = Oracle(w)
        scenario = SHAPES[shape](w, oracle, random.Random(seed))
        with seams.installed(w, on_rename=scenario.on_rename):
            main = w.sched.run(scenario.main)
            if main.error is not None and not isinstance(main.error, Crash):
                unexpected(oracle, "the scenario", main.error)
            for actor in w.sched.actors:
                # A zombie driver's failure reaches nobody, but it must still be one of the product's.
                if actor.kind == "driver" and actor.error is not None:
                    unexpected(oracle, actor.name, actor.error)
            if w.sched.deadlock:
                oracle.fail("deadlock", "every live actor waits for another")
            if w.sched.limit_hit:
                oracle.fail("stuck", f"no end after {max_steps} steps")
            w.cluster.settle()
            oracle.check_now()
            scenario.finals()
    return Result(shape, seed, w.sched.step, list(plan.injected), list(oracle.violations), scenario.outcome(),
                  w.sched.trace, time.perf_counter() - started)


def shrink(result: Result, rules: Optional[set] = None) -> Result:
    """Drop faults one at a time while a violation of the same rule(s) remains."""
    rules = rules or result.rules
    best = run_one(result.shape, result.seed, list(result.faults))
    if not best.rules & rules:
        return result  # the replay diverged: keep the original
    faults = list(best.faults)
    i = 0
    while i < len(faults):
        candidate = faults[:i] + faults[i + 1:]
        attempt = run_one(result.shape, result.seed, candidate)
        if attempt.rules & rules:
            best, faults = attempt, list(attempt.faults)
        else:
            i += 1
    return best


def known(shape: str, violation: Violation) -> bool:
    rules, _why = KNOWN_DEFECTS.get(shape, (set(), ""))
    return violation.rule in rules


def fault_spec(faults: list[Fault]) -> str:
    return ";".join(f"{f.kind}:{f.arg}@{f.actor}#{f.actor_step}@{f.label}" for f in faults)


def parse_faults(spec: str) -> list[Fault]:
    out = []
    for item in filter(None, spec.split(";")):
        kind_arg, actor_step, label = item.split("@", 2)
        kind, arg = kind_arg.split(":")
        actor, step = actor_step.rsplit("#", 1)
        out.append(Fault(0, actor, int(step), label, kind, int(arg)))
    return out
