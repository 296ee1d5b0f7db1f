"""Faults: what can go wrong at a step, and the plan that decides when it does.

A :class:`FaultPlan` either draws faults at random (at a rate, up to a budget, among the
kinds the step allows) or replays a recorded list; a recorded :class:`Fault` names the
actor, the step's label and which occurrence of that label, so it lands in the same place
when the code around it makes more or fewer requests.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from tests.simulation.scheduler import Actor

# Fault kinds. The first four the scheduler applies itself; the caller of point() acts on
# the others (it names the ones it can act on in ``allow``).
CRASH, STALL, SLOW, OUTAGE = "crash", "stall", "slow", "outage"
FAIL, LOSE, DROP, SPARK = "fail", "lose", "drop", "spark"


@dataclass
class Fault:
    """``kind`` strikes the ``nth`` time actor ``actor`` reaches a step labelled ``label``
    (a label and its count, not a global step number, so that a recorded fault still lands
    in the same place when the code around it makes more or fewer requests)."""

    actor: str
    label: str
    nth: int
    kind: str
    arg: int = 0  # stall: steps until resumed; slow: ms; outage: ms
    step: int = 0  # where it struck (informative)

    def key(self) -> tuple:
        return (self.actor, self.label, self.nth)

    def __str__(self) -> str:
        extra = f"({self.arg})" if self.arg else ""
        return f"{self.kind}{extra} at {self.actor}'s {self.label} #{self.nth} [step {self.step}]"


@dataclass
class FaultPlan:
    """Which faults a schedule injects.

    Random mode (``script`` None): at each step, with probability ``rate``, one of the
    kinds the step allows, weighted by ``weights``, until ``budget`` faults were injected.
    Scripted mode: exactly the faults of ``script`` (matched by actor, the actor's step
    count and label), which is how a failing schedule is replayed and shrunk.
    """

    rate: float = 0.02
    budget: int = 4
    weights: dict = field(default_factory=lambda: {CRASH: 4, STALL: 1, SLOW: 1, OUTAGE: 1, FAIL: 2, LOSE: 1,
                                                   DROP: 1, SPARK: 3})
    script: list | None = None
    injected: list = field(default_factory=list)

    def decide(self, step: int, actor: "Actor", label: str, allow: Iterable[str],
               rng: random.Random) -> Fault | None:
        allowed = [k for k in allow if self.weights.get(k, 0) > 0]
        nth = actor.labels.get(label, 0)
        if self.script is not None:
            for fault in self.script:
                if fault.key() == (actor.name, label, nth) and fault.kind in allow:
                    found = Fault(actor.name, label, nth, fault.kind, fault.arg, step)
                    self.injected.append(found)
                    return found
            return None
        if not allowed or len(self.injected) >= self.budget or rng.random() >= self.rate:
            return None
        kind = rng.choices(allowed, [self.weights[k] for k in allowed])[0]
        arg = {STALL: rng.randint(20, 400), SLOW: rng.randint(5_000, 130_000),
               OUTAGE: rng.randint(1_000, 40_000)}.get(kind, 0)
        fault = Fault(actor.name, label, nth, kind, arg, step)
        self.injected.append(fault)
        return fault
