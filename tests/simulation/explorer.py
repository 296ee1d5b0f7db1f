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
from typing import Callable

from tests.simulation import seams
from tests.simulation.directed import DIRECTED
from tests.simulation.faults import Fault, FaultPlan
from tests.simulation.invariants import Oracle, Violation
from tests.simulation.scheduler import Crash
from tests.simulation.shapes import KNOWN_DEFECTS, SHAPES, Scenario
from tests.simulation.spark_jobs import unexpected
from tests.simulation.world import World

# Every shape a schedule can name: the randomized ones and the directed ones.
ALL_SHAPES: dict[str, Callable[[World, Oracle, random.Random], Scenario]] = {
    **SHAPES, **{"directed:" + name: builder for name, (builder, _rules, _why) in DIRECTED.items()}}


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


def run_one(shape: str, seed: int, script: list | None = None, *, rate: float = 0.02,
            budget: int = 4, max_steps: int = 20_000) -> Result:
    started = time.perf_counter()
    plan = FaultPlan(rate=rate, budget=budget, script=script)
    with tempfile.TemporaryDirectory(prefix="kafka-eos-sim-") as tmp:
        w = World(seed, plan, Path(tmp), max_steps=max_steps)
        oracle = Oracle(w)
        scenario = ALL_SHAPES[shape](w, oracle, random.Random(seed))
        with seams.installed(w, on_rename=scenario.on_rename, on_created=oracle.file_decision_created,
                             on_unlink=oracle.file_deleted):
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
            # What readers see in the end: a transaction left open only delays visibility
            # (until its timeout); "left-open" reports it when the query finishes.
            w.cluster.time_out_everything()
            oracle.check_now()
            scenario.finals()
    return Result(shape, seed, w.sched.step, list(plan.injected), list(oracle.violations), scenario.outcome(),
                  w.sched.trace, time.perf_counter() - started)


def shrink(result: Result, rules: set | None = None) -> Result:
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
    return ";".join(f"{f.kind}:{f.arg}@{f.actor}@{f.label}#{f.nth}" for f in faults)


def parse_faults(spec: str) -> list[Fault]:
    out = []
    for item in filter(None, spec.split(";")):
        kind_arg, actor, label_nth = item.split("@", 2)
        kind, arg = kind_arg.split(":")
        label, nth = label_nth.rsplit("#", 1)
        out.append(Fault(actor, label, int(nth), kind, int(arg)))
    return out
