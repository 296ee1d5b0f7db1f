"""Crash tests' faults at the protocol's named points (:mod:`kafka_eos_ds.twophase.faults`).

``KAFKA_EOS_FAULT="<point>[@batch][#partition][!attempt][*n][:action]"``, several separated
by ``,``; ``*n`` acts only at the n-th match of the run (counted in ``$KAFKA_EOS_FAULT_COUNTS``:
e.g. the second write of a micro-batch inside foreachBatch). Actions: ``kill`` (default:
SIGKILL this process; at ``driver-*`` points also the JVM driver's process group, so start
the driver in its own session), ``exit`` (``os._exit(1)``), ``raise``, ``sleep<seconds>`` (a
slow step: ``sleep20``), ``gate`` (create the file named by ``$KAFKA_EOS_FAULT_GATE`` and
wait until the test removes it, at most :data:`GATE_WAIT_S`: the test acts on the cluster at
that exact point, e.g. restarts a broker). ``commit-raise`` raises by default; several
actions at one point run in order.

:func:`environment` gives the variables that switch this on in a Spark driver process
and all its workers (the product loads :func:`inject` through ``KAFKA_EOS_FAULT_HOOK``).
Those are fixed when the driver's JVM starts (its Python workers inherit its environment);
a driver that serves many runs takes :func:`file_environment` instead, and each run's
faults, gate and count directory are written to that file (:func:`write_file`), which every
check reads again when it has changed. :func:`kills_driver` tells which specs need a driver
of their own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from typing import Mapping

_SPEC = re.compile(r"^(?P<point>[a-z-]+)(@(?P<batch>\d+))?(#(?P<part>\d+))?(!(?P<attempt>\d+))?(\*(?P<nth>\d+))?"
                   r"(:(?P<action>\w+))?$")
ENV = "KAFKA_EOS_FAULT"
GATE_ENV = "KAFKA_EOS_FAULT_GATE"
COUNTS_ENV = "KAFKA_EOS_FAULT_COUNTS"
FILE_ENV = "KAFKA_EOS_FAULT_FILE"
GATE_WAIT_S = 180.0


class InjectedFault(RuntimeError):
    """Raised by a ``raise`` fault."""


def environment(spec: str, gate: str | None = None, counts: str | None = None) -> dict[str, str]:
    """The environment variables that inject ``spec`` into a process and its children
    (``gate``: the file a ``gate`` action creates and waits on; ``counts``: the directory
    where ``*n`` faults count their matches)."""
    env = {ENV: spec, **_hook_environment()}
    if gate is not None:
        env[GATE_ENV] = gate
    if counts is not None:
        env[COUNTS_ENV] = counts
    return env


def file_environment(path: str) -> dict[str, str]:
    """The environment variables of a driver whose faults are read from the file ``path``
    at every check (written by :func:`write_file`; no file: no faults)."""
    return {FILE_ENV: path, **_hook_environment()}


def _hook_environment() -> dict[str, str]:
    # Imported here, not at the top: in a process started with this environment, importing
    # the product loads the hook from this module, which may itself be importing then (it
    # is, when it is imported before the product: the warm driver's process).
    from kafka_eos_ds.twophase.faults import HOOK_ENV

    return {HOOK_ENV: f"{__name__}:inject"}


def write_file(path: str, spec: str | None, gate: str | None = None, counts: str | None = None) -> None:
    """The faults of the next run of a driver started with :func:`file_environment`
    (``spec=None``: none). Written aside, then renamed: a check reads the old file or the
    new one, never half of one."""
    settings = {ENV: spec or "", GATE_ENV: gate or "", COUNTS_ENV: counts or ""}
    aside = f"{path}.{os.getpid()}"
    with open(aside, "w") as f:
        json.dump(settings, f)
    os.replace(aside, path)


def kills_driver(spec: str | None) -> bool:
    """Whether a fault of ``spec`` ends the driver process: a ``driver-*`` point whose
    action is ``kill`` (the default) or ``exit``. A run with such a fault needs a driver of
    its own; any other (``raise``, ``sleep``, ``gate``, faults in tasks, whose ``kill``
    ends only the task's Python worker) leaves the driver serving. A spec that does not
    parse counts as killing: the fresh driver is the safe side."""
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        m = _SPEC.match(item.strip())
        if m is None:
            return True
        if m["point"].startswith("driver-") and (m["action"] or "kill") in ("kill", "exit"):
            return True
    return False


_file_cache: tuple[tuple, Mapping[str, str]] = ((), {})


def _settings() -> Mapping[str, str]:
    """Where this process's fault variables come from: the file named by
    ``$KAFKA_EOS_FAULT_FILE`` when there is one (re-read only when its inode, time or size
    changed: a check is one ``stat``), else the environment."""
    global _file_cache
    path = os.environ.get(FILE_ENV)
    if not path:
        return os.environ
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    key = (path, st.st_ino, st.st_mtime_ns, st.st_size)
    if _file_cache[0] != key:
        with open(path) as f:
            _file_cache = (key, json.load(f))
    return _file_cache[1]


def inject(point: str, *, batch: int | None = None, partition: int | None = None,
           attempt: int | None = None) -> None:
    """The hook: act on every fault of ``$KAFKA_EOS_FAULT`` (or of the fault file) that
    matches this point."""
    settings = _settings()
    spec = settings.get(ENV)
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
        if m["nth"] is not None and _hits(item.strip(), settings.get(COUNTS_ENV)) != int(m["nth"]):
            continue
        _act(point, m["action"] or ("raise" if point == "commit-raise" else "kill"), settings.get(GATE_ENV))


def _hits(item: str, directory: str | None) -> int:
    """How many times ``item`` has matched so far in this run, this time included: counted
    in files under ``$KAFKA_EOS_FAULT_COUNTS``, because a run's matches happen in several
    processes (the driver's steps each run in a fresh Python worker)."""
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


def _act(point: str, action: str, gate: str | None) -> None:
    if action.startswith("sleep") and action[5:].isdigit():
        time.sleep(int(action[5:]))
        return
    if action == "gate":
        _wait_at_gate(point, gate)
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


def _wait_at_gate(point: str, gate: str | None) -> None:
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


def _ancestor_jvm() -> int | None:
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
