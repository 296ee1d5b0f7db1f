"""One simulated world: the model cluster, the scheduler, a scratch directory, and the
hooks that invariants register. The adapters find the world of the running simulation
through :func:`world` (the product builds its clients itself, without a handle to pass)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable

from tests.simulation.faults import FaultPlan
from tests.simulation.model.clock import Clock
from tests.simulation.model.cluster import Cluster
from tests.simulation.scheduler import Actor, Scheduler

_CURRENT: "World" | None = None


def world() -> "World":
    assert _CURRENT is not None, "no simulation is running"
    return _CURRENT


class World:
    def __init__(self, seed: int, plan: FaultPlan, root: Path, *, max_steps: int = 20_000,
                 **cluster: Any) -> None:
        self.seed = seed
        self.plan = plan
        self.clock = Clock()
        self.cluster = Cluster(self.clock, **cluster)
        self.root = root
        self.checks: list[Callable[[], None]] = []
        # Knobs a directed schedule sets to make one outcome certain: "late_kill" (the
        # chance a kill reaches a losing task attempt too late, default 0.3),
        # "spark_event" ("speculation" or "stage": what a Spark-level fault is).
        self.tuning: dict[str, Any] = {}
        self.listings: list[tuple[int, str | None, str]] = []  # (step, pattern, who listed)
        self.sched = Scheduler(seed, self.clock, plan, tick=self.cluster.tick, check=self._check,
                               max_steps=max_steps, switch_hook=self._switch)
        self.sched.outage = self._outage
        self._uuids = 0
        # The sinks' runtimes by kind ("kafka", "file"), while plugged in (seams.installed).
        self.runtimes: dict[str, Any] = {}

    def _check(self) -> None:
        for check in self.checks:
            check()

    def _outage(self, ms: int) -> None:
        self.cluster.make_unavailable(ms)

    def _switch(self, actor: Actor) -> None:
        # The running actor's Spark TaskContext (None on drivers), as a Python worker has it.
        from pyspark import TaskContext

        TaskContext._setTaskContext(actor.context)

    def on_listing(self, pattern: str | None) -> None:
        who = self.sched.current.name if self.sched.current else "?"
        self.listings.append((self.sched.step, pattern, who))

    def sleep(self, seconds: float) -> None:
        self.sched.sleep(seconds)

    def uuid4(self) -> uuid.UUID:
        self._uuids += 1
        return uuid.UUID(int=(self.seed * 1_000_003 + self._uuids) % (1 << 122) | (4 << 76))

    def activate(self) -> None:
        global _CURRENT
        _CURRENT = self

    @staticmethod
    def deactivate() -> None:
        global _CURRENT
        _CURRENT = None
