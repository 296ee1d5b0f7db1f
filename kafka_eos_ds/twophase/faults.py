"""Test-only fault injection at named points of the protocol; free when unset.

``KAFKA_EOS_FAULT="<point>[@batch][#partition][!attempt][:action]"``, several separated
by ``,``. Points: ``task-before-precommit``, ``task-after-precommit``,
``driver-after-decision``, ``driver-after-first-commit``, ``driver-after-all-commits``,
``commit-raise``. Actions: ``kill`` (default: SIGKILL this process; at ``driver-*``
points the whole process group, i.e. the JVM driver and its Python processes, so start
the driver in its own session), ``exit`` (``os._exit(1)``), ``raise``.
``commit-raise`` raises by default.
"""

from __future__ import annotations

import os
import re
import signal
from typing import Optional

_SPEC = re.compile(r"^(?P<point>[a-z-]+)(@(?P<batch>\d+))?(#(?P<part>\d+))?(!(?P<attempt>\d+))?(:(?P<action>\w+))?$")
_ENV = "KAFKA_EOS_FAULT"


class InjectedFault(RuntimeError):
    """Raised by a ``raise`` fault."""


def check(point: str, *, batch: Optional[int] = None, partition: Optional[int] = None,
          attempt: Optional[int] = None) -> None:
    spec = os.environ.get(_ENV)
    if not spec:
        return
    for item in spec.split(","):
        m = _SPEC.match(item.strip())
        if not m or m["point"] != point:
            continue
        if m["batch"] is not None and (batch is None or int(m["batch"]) != int(batch)):
            continue
        if m["part"] is not None and (partition is None or int(m["part"]) != int(partition)):
            continue
        if m["attempt"] is not None and (attempt is None or int(m["attempt"]) != int(attempt)):
            continue
        _act(point, m["action"] or ("raise" if point == "commit-raise" else "kill"))


def _act(point: str, action: str) -> None:
    if action == "raise":
        raise InjectedFault(f"injected fault at {point}")
    if action == "exit":
        os._exit(1)
    if point.startswith("driver-"):
        # The driver's Python workers are children of the JVM; killing only this worker
        # would look like a failed call, not a driver crash.
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
