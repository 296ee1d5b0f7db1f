"""Retrying a step whose failure may be transient (a coordinator moving, a broker
restarting): the one retry policy of the driver's steps."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

from kafka_eos_ds.errors import KafkaEosError, TransactionError

log = logging.getLogger(__name__)

# What a failed set-up step tells the user (the ``then`` of :func:`retrying`): one text
# for every driver step of both sinks that decides nothing.
NOTHING_DECIDED = "Nothing was decided by this step; restarting the query runs it again."


def retrying(call: Callable[[], Any], failure: str, timeout_s: float, *, again: Any = None, then: str = "",
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Any:
    """``call()`` until it answers something other than ``again``, retrying retriable
    errors with backoff for ``timeout_s``; then a retriable TransactionError that starts
    with ``failure`` and ends with ``then`` (what the failure leaves behind). A
    non-retriable error is raised as it is."""
    deadline = clock() + timeout_s
    delay = 0.05
    last: BaseException | None = None
    while True:
        try:
            answer = call()
            if again is None or answer is not again:
                return answer
        except KafkaEosError as exc:
            if not exc.retriable:
                raise
            if last is None:  # once per step: a restarting broker answers so for seconds
                log.warning("%s yet (%s); retrying for up to %.0fs", failure, exc, deadline - clock())
            last = exc
        if clock() >= deadline:
            raise TransactionError(f"{failure} within {timeout_s:.0f}s (last error: {last}). {then}".rstrip(),
                                   retriable=True) from last
        sleep(delay)
        delay = min(delay * 2, 2.0)
