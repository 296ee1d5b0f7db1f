"""Crash tests' faults at the protocol's named points (:mod:`kafka_eos_ds.twophase.faults`).

``KAFKA_EOS_FAULT="<point>[@batch][#partition][!attempt][*n][:action]"``, several separated
by ``,``; ``*n`` acts only at the n-th match of the run (counted in ``$KAFKA_EOS_FAULT_COUNTS``:
e.g. the second write of a micro-batch inside foreachBatch). Actions: ``kill`` (default:
SIGKILL this process; at ``driver-*`` points also the JVM driver's process group, so start
the driver in its own session), ``exit``
(``os._exit(1)``), ``raise``, ``sleep<seconds>`` (a slow step: ``sleep20``), ``gate`` (create the
file named by ``$KAFKA_EOS_FAULT_GATE`` and wait until the test removes it, at most
:data:`GATE_WAIT_S`: the test acts on the cluster at that exact point, e.g. restarts a
broker). ``commit-raise`` raises by default; several actions at one point run in order.

:func:`environment` gives the variables that switch this on in a Spark driver process
and all its workers (the product loads :func:`inject` through ``KAFKA_EOS_FAULT_HOOK``).
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Optional

from kafka_eos_ds.twophase.faults import HOOK_ENV

_SPEC = re.compile(r"^(?P<point>[a-z-]+)(@(?P<batch>\d+))?(#(?P<part>\d+))?(!(?P<attempt>\d+))?(\*(?P<nth>\d+))?"
                   r"(:(?P<action>\w+))?$")
ENV = "KAFKA_EOS_FAULT"
GATE_ENV = "KAFKA_EOS_FAULT_GATE"
COUNTS_ENV = "KAFKA_EOS_FAULT_COUNTS"
GATE_WAIT_S = 180.0


class InjectedFault(RuntimeError):
    """Raised by a ``raise`` fault."""


def environment(spec: str, gate: Optional[str] = None, counts: Optional[str] = None) -> dict[str, str]:
    """The environment variables that inject ``spec`` into a process and its children
    (``gate``: the file a ``gate`` action creates and waits on; ``counts``: the directory
    where ``*n`` faults count their matches)."""
    env = {ENV: spec, HOOK_ENV: f"{__name__}:inject"}
    if gate is not None:
        env[GATE_ENV] = gate
    if counts is not None:
        env[COUNTS_ENV] = counts
    return env


def inject(point: str, *, batch: Optional[int] = None, partition: Optional[int] = None,
           attempt: Optional[int] = None) -> None:
    """The hook: act on every fault of ``$KAFKA_EOS_FAULT`` that matches this point."""
    spec = os.environ.get(ENV)
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
        if m["nth"] is not None and _hits(item.strip()) != int(m["nth"]):
            continue
        _act(point, m["action"] or ("raise" if point == "commit-raise" else "kill"))


def _hits(item: str) -> int:
    """How many times ``item`` has matched so far in this run, this time included: counted
    in files under ``$KAFKA_EOS_FAULT_COUNTS``, because a run's matches happen in several
    processes (the driver's steps each run in a fresh Python worker)."""
    directory = os.environ.get(COUNTS_ENV)
    if not directory:
        raise InjectedFault(f"a fault with '*N' ({item}) needs ${COUNTS_ENV} (a directory to count in)")
    os.makedirs(directory, exist_ok=True)
    # One file created per match: O_EXCL makes concurrent matches count apart.
    name = re.sub(r"[^A-Za-z0-9@#!*:-]", "_", item)
    n = 1
    while True:
        try:
            os.close(os.open(os.path.join(directory, f"{name}.{n}"), os.O_CREAT | os.O_EXCL))
            return n
        except FileExistsError:
            n += 1


def _act(point: str, action: str) -> None:
    if action.startswith("sleep") and action[5:].isdigit():
        time.sleep(int(action[5:]))
        return
    if action == "gate":
        _wait_at_gate(point)
        return
    if action == "raise":
        raise InjectedFault(f"injected fault at {point}")
    if action == "exit":
        os._exit(1)
    if point.startswith("driver-"):
        # The driver's Python workers are children of the JVM (and PySpark's worker
        # daemon makes its own process group); killing only this worker would look like
        # a failed call, not a driver crash. Kill the JVM's process group.
        jvm = _ancestor_jvm()
        if jvm is not None:
            os.killpg(os.getpgid(jvm), signal.SIGKILL)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_at_gate(point: str) -> None:
    gate = os.environ.get(GATE_ENV)
    if not gate:
        raise InjectedFault(f"a gate fault at {point} needs ${GATE_ENV} (the file to wait on)")
    # Written aside, then renamed: whoever sees the gate sees its content too.
    aside = f"{gate}.{os.getpid()}"
    with open(aside, "w") as f:
        f.write(point)
    os.replace(aside, gate)
    deadline = time.monotonic() + GATE_WAIT_S
    while os.path.exists(gate):
        if time.monotonic() > deadline:
            raise InjectedFault(f"the gate at {point} was not opened within {GATE_WAIT_S:.0f}s")
        time.sleep(0.05)


def _ancestor_jvm() -> Optional[int]:
    pid = os.getppid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                exe = f.read().split(b"\0", 1)[0]
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return None
        if exe.endswith(b"java"):
            return pid
        pid = parent
    return None
