"""One request to the model cluster, as the product's clients see it: a step of the
scheduler first (where faults strike), then the model's answer, or what a moving
coordinator answers."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from kafka_eos_ds.errors import KafkaClientError
from tests.simulation import world as sim
from tests.simulation.faults import CRASH, DROP, LOSE, OUTAGE, SLOW, STALL
from tests.simulation.model import errors as e

# What can strike at a request: the process dies or stalls, the step is slow, the coordinator
# moves; for requests whose loss the product sees (admin calls), a lost request or answer.
PROCESS = (CRASH, STALL, SLOW, OUTAGE)
NETWORK = PROCESS + (LOSE, DROP)

RETRIABLE = (e.REQUEST_TIMED_OUT, e.CONCURRENT_TRANSACTIONS) + e.UNAVAILABLE


def _timed_out(text: str) -> Exception:
    return KafkaClientError(text, retriable=True)


def request(label: str, detail: str, apply: Callable[[], Any], *, coordinator: bool = True,
            allow: Sequence[str] = NETWORK, unavailable: Any = None,
            lost: Callable[[str], Exception] = _timed_out) -> Any:
    """One request: a step, then the model's answer (or what a moving coordinator says).

    ``unavailable(code)``: the answer while the coordinator moves (it may raise); None
    raises a retriable KafkaClientError. ``lost(text)``: the exception the client raises
    for a lost request or answer."""
    w = sim.world()
    fault = w.sched.point("kafka:" + label, detail, allow)
    if fault is not None and fault.kind == DROP:
        raise lost(f"{label} failed: request timed out (simulated)")
    if coordinator and w.cluster.coordinator_error() != e.NONE:
        code = w.cluster.coordinator_error()
        if unavailable is None:
            raise KafkaClientError(f"{label} failed: {e.name(code)}", retriable=True)
        return unavailable(code)
    answer = apply()
    if fault is not None and fault.kind == LOSE:
        raise lost(f"{label}: the answer was lost (simulated); it took effect")
    return answer
