"""A driver presumed dead and its replacement, interleaved through the sink's fault points
(:mod:`kafka_eos_ds.twophase.faults`): the zombie stalls at one point; meanwhile the
replacement plans and starts its commit, which pauses after its batch's decision (or ends
before it); then the zombie goes on to its end, and then the replacement. What the Kafka
sink's zombie-driver tests on a real broker share (`test_decisions.py`,
`test_zombie_step.py`)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kafka_eos_ds.twophase import faults

Step = Callable[[], object]


class TwoDrivers:
    """``zombie_at``: the fault point the zombie stalls at (in batch ``zombie_batch``, or
    any); the replacement pauses after the decision of batch ``decided``."""

    def __init__(self, zombie_at: str, zombie_batch: int | None = None, decided: int = 1) -> None:
        self.zombie_at, self.zombie_batch, self.decided_batch = zombie_at, zombie_batch, decided
        self.zombie_stalled, self.zombie_go, self.decided, self.new_go = (threading.Event() for _ in range(4))
        self.errors: dict[str, Exception] = {}

    def _hook(self, point: str, batch: int | None = None, **_: object) -> None:
        if (point == self.zombie_at and threading.current_thread().name == "zombie"
                and self.zombie_batch in (None, batch)):
            self.zombie_stalled.set()
            self.zombie_go.wait(60)
        elif (point, batch) == ("driver-after-decision", self.decided_batch):
            self.decided.set()
            self.new_go.wait(60)

    def _start(self, name: str, step: Step) -> threading.Thread:
        def run() -> None:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the tests assert on it
                self.errors[name] = exc

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    def play(self, zombie: Step, replacement: Callable[[], Step]) -> dict[str, Exception]:
        """Run ``zombie`` until it stalls; then ``replacement()`` (the new driver's steps up
        to its commit, in this thread) and the commit step it returns, until it decides or
        ends; then let the zombie finish, then the commit. Returns each one's error."""
        faults.install(self._hook)
        try:
            stalled = self._start("zombie", zombie)
            assert self.zombie_stalled.wait(60), "the zombie never reached " + self.zombie_at
            new = self._start("new", replacement())
            while not self.decided.wait(0.2) and new.is_alive():
                pass
            self.zombie_go.set()
            stalled.join(90)
            self.new_go.set()
            new.join(90)
            assert not stalled.is_alive() and not new.is_alive()
        finally:
            self.zombie_go.set()
            self.new_go.set()
            faults.install(None)
        return self.errors
