"""Where the simulation plugs into the product: the runtimes it hands to the sinks.

No product file is edited and no module attribute is replaced: each sink takes what it
uses of its process from a runtime (:mod:`kafka_eos_ds.twophase.runtime`), and
:func:`installed` builds the simulation's and registers them under their names (a writer
pickled for its tasks carries its runtime's name) for the duration of the block:

* the Kafka sink's (:class:`~kafka_eos_ds.kafka_sink.runtime.KafkaRuntime`): the real
  ``TransactionCoordinator`` built on the model's admin client and coordinator channel
  (its ``admin_factory`` and ``channel_factory``), the model's admin, producer and
  consumers under the real ``KafkaDecisionLog`` (``log_clients``), the model's metadata
  client and task producer (:mod:`.adapters`); driver clients kept for the run only;
* the table sink's (:class:`~kafka_eos_ds.table_sink.runtime.TableRuntime`): the local
  store's ``os`` -> :class:`OsProxy` (a step at each half of every move, where a crash can
  strike between a pending file and its final name, or between the link and the unlink,
  and at every deletion), which also shows the oracle every decision file created and
  every file deleted; a staged file's stamp seeded (:func:`_stamp`);
* both: the virtual clock (:class:`VirtualTime`: the committers, the set-up retries, the
  commit log's and the coordinator client's waits); the committer's thread pool ->
  :class:`SequentialExecutor` (a seeded order, one step at a time, so a schedule is
  reproducible); uuids seeded (a batch write's job id, the table sink's temporary
  decision files);
* ``twophase.faults``: the product's named crash points become steps of the scheduler.

:mod:`.sinks` builds the data sources with them (``World.runtimes``). When a seam changes
in the product, this module and :mod:`.adapters` are what to adapt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from tests.simulation import adapters
from tests.simulation.faults import CRASH, FAIL, SLOW, STALL
from tests.simulation.world import World

if TYPE_CHECKING:
    from kafka_eos_ds.twophase.runtime import Runtime

# Named points where the driver's process may die, stall or be slow; commit-raise is
# where a test makes commit() raise (Spark then calls abort with the same messages).
DRIVER_POINT = (CRASH, STALL, SLOW)


class VirtualTime:
    """The virtual clock as the sinks' runtimes hand it out (wall time, monotonic, sleep)."""

    def __init__(self, w: World) -> None:
        self._w = w

    def time(self) -> float:
        return self._w.clock.time()

    def monotonic(self) -> float:
        return self._w.clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self._w.sleep(seconds)


class SequentialExecutor:
    """``concurrent.futures.ThreadPoolExecutor`` as the committer uses it (``map`` in a
    ``with`` block), running the calls one after the other in a seeded order."""

    def __init__(self, max_workers: int | None = None) -> None:
        pass

    def __enter__(self) -> "SequentialExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any], *more: Iterable[Any]) -> Iterator[Any]:
        from tests.simulation.world import world

        args = list(zip(items, *more, strict=True))
        order = list(range(len(args)))
        random.Random(world().seed * 31 + world().sched.step).shuffle(order)
        results: dict[int, Any] = {}
        for i in order:
            results[i] = fn(*args[i])
        return iter([results[i] for i in range(len(args))])


class OsProxy:
    """The ``os`` module for the file sink: a scheduler step before each rename/replace/link/
    unlink, and hooks that see every rename, every decision file created, and every file
    deleted (the invariants check final renames and deletions of decided files)."""

    def __init__(self, w: World, on_rename: Callable[[str, str], None],
                 on_created: Callable[[str], None] = lambda path: None,
                 on_unlink: Callable[[str], None] = lambda path: None) -> None:
        self._w = w
        self._on_rename = on_rename
        self._on_created = on_created
        self._on_unlink = on_unlink

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def rename(self, src: Any, dst: Any) -> None:
        self._w.sched.point("fs:rename", f"{os.path.basename(str(src))} -> {_short(self._w, dst)}", DRIVER_POINT)
        os.rename(src, dst)
        self._on_rename(str(src), str(dst))

    def replace(self, src: Any, dst: Any) -> None:
        self._w.sched.point("fs:replace", _short(self._w, dst), DRIVER_POINT)
        os.replace(src, dst)

    def link(self, src: Any, dst: Any) -> None:
        """A decision file created only if absent (the file sink's numbered decisions: the
        link of a written temporary file), or the first half of a move (pending -> final,
        in-progress -> pending: a link, then the old name unlinked)."""
        if os.path.basename(str(src)).endswith(".tmp"):
            self._w.sched.point("fs:link", _short(self._w, dst), DRIVER_POINT)
            os.link(src, dst)
            self._on_created(str(dst))
            return
        self._w.sched.point("fs:rename", f"{os.path.basename(str(src))} -> {_short(self._w, dst)}", DRIVER_POINT)
        os.link(src, dst)
        self._on_rename(str(src), str(dst))

    def unlink(self, path: Any) -> None:
        """A file deleted (a fence, a stale decision dropped, or the second half of a move):
        a step (a driver may stall between its claim and a deletion, and a crash in a move
        leaves both names on one file), and the oracle sees it before it goes, while it can
        still tell whether it was final already."""
        self._w.sched.point("fs:unlink", _short(self._w, path), DRIVER_POINT)
        self._on_unlink(str(path))
        os.unlink(path)

    remove = unlink


def _short(w: World, path: Any) -> str:
    return os.path.relpath(str(path), str(w.root))


def _fault_hook(w: World) -> Callable[..., None]:
    from kafka_eos_tools.faults import InjectedFault

    def hook(point: str, *, batch: int | None = None, partition: int | None = None,
             attempt: int | None = None) -> None:
        where = " ".join(f"{k}={v}" for k, v in (("batch", batch), ("partition", partition), ("attempt", attempt))
                         if v is not None)
        if point == "commit-raise":
            if w.sched.point("fault:" + point, where, (FAIL,)) is not None:
                raise InjectedFault(f"injected fault at {point}")
            return
        w.sched.point("fault:" + point, where, DRIVER_POINT)

    return hook


def _stamp(w: World) -> Callable[[], str]:
    """A staged file's stamp, seeded too, but with the count in its 8 hex digits: a zombie's
    staged file and a live attempt's of the same id have different names, as in the
    product (equal stamps hid a zombie deleting the other's file)."""

    def stamp() -> str:
        n = w.uuid4().int
        return uuid.UUID(int=((n & 0xFFFFFFFF) << 96) | (n & ((1 << 96) - 1))).hex[:8]

    return stamp


def runtimes(w: World, os_proxy: OsProxy) -> dict[str, Runtime]:
    """The simulation's runtimes of ``w``, by sink kind ("kafka", "file")."""
    from kafka_eos_ds.kafka.driver_session import ClientSessions
    from kafka_eos_ds.kafka_sink.runtime import KafkaRuntime
    from kafka_eos_ds.table_sink.runtime import TableRuntime

    clock = VirtualTime(w)
    common: dict[str, Any] = {"clock": clock.monotonic, "wall": clock.time, "sleep": clock.sleep,
                              "uuid4": w.uuid4, "executor": SequentialExecutor}
    return {
        "kafka": KafkaRuntime(f"simulation.kafka.{id(w)}", **common, coordinator=adapters.transaction_coordinator(),
                              log_clients=adapters.ModelLogClients, metadata_client=adapters.ModelMetadataClient,
                              partition_writer=adapters.ModelPartitionWriter, sessions=ClientSessions()),
        "file": TableRuntime(f"simulation.file.{id(w)}", **common, os=os_proxy, stamp=_stamp(w)),
    }


@contextlib.contextmanager
def installed(w: World, on_rename: Callable[[str, str], None] = lambda src, dst: None,
              on_created: Callable[[str], None] = lambda path: None,
              on_unlink: Callable[[str], None] = lambda path: None) -> Iterator[World]:
    """Plug ``w`` into the product for the duration of the block (the hooks: :class:`OsProxy`)."""
    from kafka_eos_ds.twophase import faults
    from kafka_eos_ds.twophase.runtime import register, unregister

    w.runtimes = runtimes(w, OsProxy(w, on_rename, on_created, on_unlink))
    for runtime in w.runtimes.values():
        register(runtime)
    quiet = logging.getLogger("kafka_eos_ds")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    previous_hook = faults._hook
    faults.install(_fault_hook(w))
    w.activate()
    try:
        yield w
    finally:
        w.deactivate()
        faults.install(previous_hook)
        quiet.setLevel(level)
        for runtime in w.runtimes.values():
            unregister(runtime)
        from pyspark import TaskContext

        TaskContext._setTaskContext(None)
