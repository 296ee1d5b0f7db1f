"""Deterministic cooperative actors on a virtual clock, with faults at every step.

Every simulated process (a Spark driver run, a task attempt, a second sink's driver) is
an :class:`Actor`: a thread that runs the product's real, synchronous code. Only one
actor runs at a time. Each call into a model (and each of the product's named fault
points) is a *step*: the actor hands control back here, and the scheduler

1. moves the virtual clock a little and lets the brokers work (markers, timeouts);
2. runs the invariant checks that must hold at every instant;
3. asks the :class:`FaultPlan` whether something goes wrong right here (the actor's
   process dies, it stalls and comes back much later, the step is slow, a request's
   answer is lost, the coordinator moves, a Spark-level event happens);
4. picks the next actor to run, from a random generator seeded by (seed, step).

A dead actor raises :class:`Crash` (a BaseException, so the product's ``except
Exception`` does not swallow it) at its next step, and any call it makes after that has
no effect: a killed process does not clean up. Given the seed and the fault list, a run
is reproducible step by step.
"""

from __future__ import annotations

import random
import threading
from typing import Any, Callable, Iterable

from tests.simulation.faults import CRASH, DROP, FAIL, LOSE, OUTAGE, SLOW, SPARK, STALL, Fault, FaultPlan
from tests.simulation.model.clock import Clock


class Crash(BaseException):
    """The actor's process died at this step (a SIGKILL): nothing after it takes effect."""


class StepLimit(BaseException):
    """The schedule ran out of steps (a livelock, or a schedule too long)."""


class Actor:
    """One simulated process, run on its own thread, one step at a time."""

    def __init__(self, sched: "Scheduler", name: str, fn: Callable[[], Any], kind: str,
                 context: Any = None) -> None:
        self.sched = sched
        self.name = name
        self.fn = fn
        self.kind = kind
        self.context = context          # a pyspark TaskContext for tasks (set while it runs)
        self.state = "new"              # new, runnable, sleeping, waiting, paused, done
        self.wake_ms: int | None = None
        self.cond: Callable[[], bool] | None = None
        self.resume_step = 0
        self.killed = False
        self.steps = 0
        self.labels: dict[str, int] = {}  # label -> how many steps of this actor had it
        self.error: BaseException | None = None
        self.result: Any = None
        self.on_death: list[Callable[[], None]] = []
        self._sem = threading.Semaphore(0)
        self._thread: threading.Thread | None = None

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def crashed(self) -> bool:
        return self.done and isinstance(self.error, Crash)

    def __repr__(self) -> str:
        return f"<{self.name} {self.state}{' killed' if self.killed else ''}>"


class Scheduler:
    def __init__(self, seed: int, clock: Clock, plan: FaultPlan, *, tick: Callable[[random.Random], list] = None,
                 check: Callable[[], None] = None, max_steps: int = 20_000, stay: float = 0.6,
                 switch_hook: Callable[[Actor | None], None] = None) -> None:
        self.seed = seed
        self.clock = clock
        self.plan = plan
        self._tick = tick
        self._check = check
        self.max_steps = max_steps
        self.stay = stay
        self.max_days = 30
        self._switch_hook = switch_hook
        self.actors: list[Actor] = []
        self.current: Actor | None = None
        self.step = 0
        self.trace: list[str] = []
        self.outage: Callable[[int], None] = lambda ms: None
        self._finished = threading.Event()
        self._tearing_down = False
        self.deadlock = False
        self.limit_hit = False

    # -- randomness ------------------------------------------------------------

    def rng(self, salt: int = 0) -> random.Random:
        """The generator of the current step (the same seed and step give the same draws);
        ``salt`` separates independent uses (fault draws must not shift interleaving draws,
        or a replay with recorded faults would interleave differently)."""
        return random.Random(self.seed * 1_000_003 + self.step * 7919 + self.clock.now_ms * 31
                             + (self.current.steps if self.current else 0) + salt * 104_729)

    # -- actors ----------------------------------------------------------------

    def spawn(self, name: str, fn: Callable[[], Any], kind: str, context: Any = None) -> Actor:
        actor = Actor(self, name, fn, kind, context)
        self.actors.append(actor)
        self.log(f"spawn {name}")
        return actor

    def log(self, text: str) -> None:
        who = self.current.name if self.current else "-"
        self.trace.append(f"{self.step:6d} {self.clock.elapsed_s():9.3f}s {who:<22} {text}")

    def kill(self, actor: Actor, why: str = "") -> None:
        """``actor``'s process dies now: it raises Crash at its next step."""
        if actor.killed or actor.done:
            return
        actor.killed = True
        self.log(f"kill {actor.name} {why}".rstrip())
        for callback in actor.on_death:
            callback()
        if actor.state in ("sleeping", "waiting", "paused"):
            actor.state = "runnable"  # so it unwinds

    def pause(self, actor: Actor, steps: int) -> None:
        actor.state, actor.resume_step = "paused", self.step + steps

    def resume(self, actor: Actor) -> None:
        """A paused actor may run again from now on."""
        if actor.state == "paused":
            actor.resume_step = self.step

    # -- what actors call --------------------------------------------------------

    def point(self, label: str, detail: str = "", allow: Iterable[str] = ()) -> Fault | None:
        """A step of the current actor; returns a fault the caller must act on, or None."""
        actor = self._me()
        self.step += 1
        actor.steps += 1
        actor.labels[label] = actor.labels.get(label, 0) + 1
        if self.step > self.max_steps and not self._tearing_down:
            self.limit_hit = True
            raise StepLimit(f"more than {self.max_steps} steps")
        rng = self.rng()
        self.clock.advance(rng.randint(0, 40))
        if self._tick is not None:
            for event in self._tick(rng):
                self.log(event)
        fault = self.plan.decide(self.step, actor, label, allow, self.rng(salt=1))
        self.log(f"{label} {detail}".rstrip() + (f"   << {fault.kind}{f'({fault.arg})' if fault.arg else ''}"
                                                    if fault else ""))
        if self._check is not None:
            self._check()
        if fault is not None:
            if fault.kind == CRASH:
                self.kill(actor, "(fault)")
                raise Crash(label)
            if fault.kind == SLOW:
                self.clock.advance(fault.arg)
            elif fault.kind == OUTAGE:
                self.outage(fault.arg)
            elif fault.kind == STALL:
                self.pause(actor, fault.arg)
                self._switch(actor)
                return None
        self._yield(actor, rng)
        return fault if fault is not None and fault.kind in (FAIL, LOSE, DROP, SPARK) else None

    def sleep(self, seconds: float) -> None:
        actor = self._me()
        if self.clock.elapsed_s() > self.max_days * 86_400 and not self._tearing_down:
            self.limit_hit = True
            raise StepLimit(f"more than {self.max_days} days of virtual time")
        actor.state, actor.wake_ms = "sleeping", self.clock.now_ms + int(seconds * 1000)
        self._switch(actor)

    def wait_until(self, cond: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Block the current actor until ``cond()``; False when ``timeout_s`` passed first."""
        actor = self._me()
        deadline = None if timeout_s is None else self.clock.now_ms + int(timeout_s * 1000)
        while not cond():
            if deadline is not None and self.clock.now_ms >= deadline:
                return False
            actor.state, actor.cond, actor.wake_ms = "waiting", cond, deadline
            self._switch(actor)
        return True

    def _me(self) -> Actor:
        actor = self.current
        assert actor is not None and actor._thread is threading.current_thread(), "called outside an actor"
        if actor.killed:
            raise Crash("dead")
        return actor

    # -- switching -------------------------------------------------------------

    def _runnable(self, actor: Actor) -> bool:
        if actor.state in ("new", "runnable"):
            return True
        if actor.state == "sleeping":
            return self.clock.now_ms >= (actor.wake_ms or 0)
        if actor.state == "waiting":
            return bool(actor.cond and actor.cond()) or (actor.wake_ms is not None and
                                                         self.clock.now_ms >= actor.wake_ms)
        if actor.state == "paused":
            return self.step >= actor.resume_step
        return False

    def _choose(self, me: Actor | None, rng: random.Random) -> Actor | None:
        while True:
            live = [a for a in self.actors if not a.done]
            if self._tearing_down:
                return live[0] if live else None
            ready = [a for a in live if self._runnable(a)]
            if ready:
                if me in ready and rng.random() < self.stay:
                    return me
                return rng.choice(ready)
            wakes = [a.wake_ms for a in live if a.state in ("sleeping", "waiting") and a.wake_ms is not None]
            if wakes:
                self.clock.advance_to(min(wakes))
                if self._tick is not None:
                    for event in self._tick(rng):
                        self.log(event)
                continue
            paused = [a for a in live if a.state == "paused"]
            if paused:  # nothing else can move: the stalled come back now
                paused[0].resume_step = self.step
                continue
            if live:
                self.deadlock = True
                self.log("deadlock: " + ", ".join(repr(a) for a in live))
                self._tearing_down = True
                for a in live:
                    a.killed = True
                continue
            return None

    def _yield(self, me: Actor, rng: random.Random) -> None:
        me.state = "runnable"
        nxt = self._choose(me, rng)
        if nxt is not me:
            self._hand_over(me, nxt)

    def _switch(self, me: Actor) -> None:
        """``me`` cannot go on (sleeping, waiting, paused): run someone else until it can."""
        nxt = self._choose(me, self.rng())
        if nxt is me:
            me.state = "runnable"
            if me.killed:
                raise Crash("dead")
            return
        self._hand_over(me, nxt)

    def _hand_over(self, me: Actor, nxt: Actor | None) -> None:
        self._resume(nxt)
        me._sem.acquire()
        # Back here: the scheduler chose me again.
        me.state = "runnable"
        if me.killed:
            raise Crash("dead")

    def _resume(self, actor: Actor | None) -> None:
        if actor is None:
            self.current = None
            self._finished.set()
            return
        self.current = actor
        if self._switch_hook is not None:
            self._switch_hook(actor)
        if actor._thread is None:
            actor.state = "runnable"
            actor._thread = threading.Thread(target=self._body, args=(actor,), name=actor.name, daemon=True)
            actor._thread.start()
        else:
            actor._sem.release()

    def _body(self, actor: Actor) -> None:
        try:
            if actor.killed:
                raise Crash("killed before it started")
            actor.result = actor.fn()
        except BaseException as exc:  # the actor's outcome, looked at by whoever waits for it
            actor.error = exc
            if isinstance(exc, StepLimit):
                self._tearing_down = True
                for a in self.actors:
                    a.killed = True
        actor.state = "done"
        self.log(f"end {actor.name}: " + ("ok" if actor.error is None else
                                          f"{type(actor.error).__name__}: {str(actor.error)[:160]}"))
        self._resume(self._choose(None, self.rng()))

    # -- the outside -------------------------------------------------------------

    def run(self, main: Callable[[], Any], name: str = "main", timeout_s: float = 120.0) -> Actor:
        """Run ``main`` as the first actor until every actor has finished."""
        first = self.spawn(name, main, "main")
        self._resume(first)
        if not self._finished.wait(timeout_s):
            raise RuntimeError(f"simulation hung (real time) at step {self.step}; last: {self.trace[-5:]}")
        return first
