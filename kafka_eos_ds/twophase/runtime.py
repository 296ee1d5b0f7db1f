"""What a sink takes from its process, in one object handed to it: a *runtime*.

A sink's steps read the time (a monotonic clock for deadlines, the wall clock where a
broker's timestamps are compared), sleep between retries, draw uuids (a job's id) and run
participants in a thread pool; each sink adds the clients it builds (:mod:`kafka_eos_ds.kafka_sink.runtime`,
:mod:`kafka_eos_ds.table_sink.runtime`). The product runs on the default runtimes; a test,
the protocol simulation above all, hands in its own (a virtual clock, seeded uuids, one
step at a time, model clients) instead of replacing module attributes.

A runtime travels with its sink to Spark's tasks, inside the pickled writer. It holds
functions and clients, which do not pickle: it pickles by name, and the unpickling
process looks the name up in :data:`registered runtimes <register>` (the defaults
register themselves when their module is imported; a test registers its own for as long
as it runs, in its own process).
"""

from __future__ import annotations

import importlib
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R", bound="Runtime")


class Pool(Protocol):
    """What the committer uses of a thread pool: ``map`` inside a ``with`` block."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...

    def map(self, fn: Callable[..., T], *iterables: Iterable[Any]) -> Iterator[T]: ...


@dataclass(frozen=True)
class Runtime:
    """The process as a sink's steps use it.

    Parameters
    ----------
    name : str
        What the runtime pickles as (:func:`register`).
    clock : callable
        Seconds, monotonic: deadlines and backoff.
    wall : callable
        Seconds since the epoch, where a step compares with a broker's timestamps.
    sleep : callable
        Waits between retries.
    uuid4 : callable
        A new random uuid (a batch write's job id).
    executor : callable
        A pool of ``n`` workers for the participants a step commits or aborts at once.
    """

    name: str
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    uuid4: Callable[[], uuid.UUID] = uuid.uuid4
    executor: Callable[[int], Pool] = ThreadPoolExecutor

    def __reduce__(self) -> tuple[Any, ...]:
        # The module of the runtime's class registers its default on import: unpickling
        # imports it first, so a fresh Spark worker finds the default by its name.
        return _lookup, (type(self).__module__, self.name)


_REGISTERED: dict[str, Runtime] = {}
_lock = threading.Lock()


def register(runtime: R) -> R:
    """Make ``runtime`` findable by its name in this process (what unpickling it asks).
    A name is registered once: a second runtime under a taken name is refused."""
    with _lock:
        kept = _REGISTERED.get(runtime.name)
        if kept is not None and kept is not runtime:
            raise ValueError(f"A runtime named {runtime.name!r} is registered already")
        _REGISTERED[runtime.name] = runtime
    return runtime


def unregister(runtime: Runtime) -> None:
    """Forget ``runtime`` (a test's, when it ends)."""
    with _lock:
        if _REGISTERED.get(runtime.name) is runtime:
            del _REGISTERED[runtime.name]


def registered(name: str) -> Runtime:
    """The runtime registered as ``name`` (LookupError if none is)."""
    with _lock:
        runtime = _REGISTERED.get(name)
    if runtime is None:
        raise LookupError(f"No runtime named {name!r} is registered in this process (a sink pickled with a test's "
                          "runtime is unpickled outside that test)")
    return runtime


def _lookup(module: str, name: str) -> Runtime:
    importlib.import_module(module)
    return registered(name)


DEFAULT = register(Runtime("twophase"))
