"""Virtual time: every timeout, retry and backoff of a simulated run is counted here.

Nothing sleeps for real. The scheduler (:mod:`tests.simulation.scheduler`) moves the
clock: a little at every step, to the earliest wake-up when every actor sleeps, and by a
long jump when a schedule makes a step slow (a GC pause, a slow network), which is how a
broker-side transaction timeout can strike between any two steps.
"""

from __future__ import annotations

# 2023-11-14T22:13:20Z: any fixed start works; a realistic epoch keeps logged times readable.
START_MS = 1_700_000_000_000


class Clock:
    """Milliseconds since the epoch, shared by the brokers' and the clients' views (no skew)."""

    def __init__(self, start_ms: int = START_MS) -> None:
        self.now_ms = start_ms
        self.start_ms = start_ms

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError("time does not go back")
        self.now_ms += int(ms)

    def advance_to(self, ms: int) -> None:
        self.now_ms = max(self.now_ms, int(ms))

    # The two readings the product takes: time.time() (wall) and time.monotonic().
    def time(self) -> float:
        return self.now_ms / 1000.0

    def monotonic(self) -> float:
        return self.now_ms / 1000.0

    def elapsed_s(self) -> float:
        return (self.now_ms - self.start_ms) / 1000.0
