"""Where the simulation plugs into the product, today: every patched name in one list.

Only module attributes are replaced (no product file is edited):

* the Kafka clients: ``sink.kafka_sink.TransactionCoordinator`` -> the real class built on
  the model's admin client and coordinator channel (its ``admin_factory`` and
  ``channel_factory``); ``sink.decision_log.LogClients`` -> the model's admin, producer
  and consumers under the real ``KafkaDecisionLog``; ``sink.kafka_sink.cluster_metadata``
  and ``sink.task_writer._PartitionWriter`` -> the :mod:`.adapters`;
* time: the committers get the virtual clock and sleep (their constructor takes both), so
  does the sinks' set-up retry (``sink.kafka_sink.retrying``, ``filesink.file_sink.retrying``); the modules that read
  the clock themselves (``sink.participants``, ``sink.decision_log``,
  ``kafka.coordinator``) read :class:`VirtualTime`;
* the committer's thread pool -> :class:`SequentialExecutor` (a seeded order, one step at a
  time, so a schedule is reproducible);
* uuids of batch writes (``twophase.writers``), of the file sink's temporary decision
  files (``storage.local``) and of its staged files' stamps (``filesink.layout``) -> seeded;
* the local store's ``os`` (``storage.local``, every file the file sink touches on a local
  disk) -> :class:`OsProxy` (a step at each half of every move, where a crash can strike
  between a pending file and its final name, or between the link and the unlink, and at
  every deletion), which also shows the oracle every decision file created and every file
  deleted;
* ``twophase.faults``: the product's named crash points become steps of the scheduler.

When a seam changes in the product, this module and :mod:`.adapters` are what to adapt.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import random
import uuid
from typing import Any, Callable, Iterable, Iterator

from tests.simulation import adapters
from tests.simulation.faults import CRASH, FAIL, SLOW, STALL
from tests.simulation.world import World

# Named points where the driver's process may die, stall or be slow; commit-raise is
# where a test makes commit() raise (Spark then calls abort with the same messages).
DRIVER_POINT = (CRASH, STALL, SLOW)


class VirtualTime:
    """The ``time`` module as the product's modules use it (time, monotonic, sleep)."""

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


@contextlib.contextmanager
def installed(w: World, on_rename: Callable[[str, str], None] = lambda src, dst: None,
              on_created: Callable[[str], None] = lambda path: None,
              on_unlink: Callable[[str], None] = lambda path: None) -> Iterator[World]:
    """Plug ``w`` into the product for the duration of the block (the hooks: :class:`OsProxy`)."""
    from kafka_eos_ds.twophase import faults
    from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
    from kafka_eos_ds.twophase.retrying import retrying

    def committer(*args: Any, **kwargs: Any) -> TwoPhaseCommitter:
        return TwoPhaseCommitter(*args, sleep=w.sleep, clock=w.clock.monotonic, **kwargs)

    def virtual_retrying(*args: Any, **kwargs: Any) -> Any:
        return retrying(*args, sleep=w.sleep, clock=w.clock.monotonic, **kwargs)

    class Uuid:
        uuid4 = staticmethod(w.uuid4)

    class StampUuid:
        """Seeded too, but with the count in the first 8 hex digits (a staged file's stamp):
        a zombie's staged file and a live attempt's of the same id have different names,
        as in the product (equal stamps hid a zombie deleting the other's file)."""

        @staticmethod
        def uuid4() -> uuid.UUID:
            n = w.uuid4().int
            return uuid.UUID(int=((n & 0xFFFFFFFF) << 96) | (n & ((1 << 96) - 1)))

    clock = VirtualTime(w)
    patches = [
        ("kafka_eos_ds.sink.kafka_sink", "TransactionCoordinator", adapters.transaction_coordinator()),
        ("kafka_eos_ds.sink.decision_log", "LogClients", adapters.ModelLogClients),
        ("kafka_eos_ds.sink.kafka_sink", "cluster_metadata", adapters.cluster_metadata),
        ("kafka_eos_ds.sink.task_writer", "_PartitionWriter", adapters.ModelPartitionWriter),
        ("kafka_eos_ds.sink.kafka_sink", "TwoPhaseCommitter", committer),
        ("kafka_eos_ds.sink.kafka_sink", "retrying", virtual_retrying),
        ("kafka_eos_ds.filesink.file_sink", "TwoPhaseCommitter", committer),
        ("kafka_eos_ds.filesink.file_sink", "retrying", virtual_retrying),
        ("kafka_eos_ds.twophase.steps", "ThreadPoolExecutor", SequentialExecutor),
        ("kafka_eos_ds.sink.participants", "time", clock),
        ("kafka_eos_ds.sink.decision_log", "time", clock),
        ("kafka_eos_ds.kafka.coordinator", "time", clock),
        ("kafka_eos_ds.twophase.writers", "uuid", Uuid),
        ("kafka_eos_ds.storage.local", "uuid", Uuid),
        ("kafka_eos_ds.filesink.layout", "uuid", StampUuid),
        ("kafka_eos_ds.storage.local", "os", OsProxy(w, on_rename, on_created, on_unlink)),
    ]
    saved = []
    for module_name, attr, new in patches:
        module = importlib.import_module(module_name)
        saved.append((module, attr, getattr(module, attr)))
        setattr(module, attr, new)
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
        for module, attr, old in reversed(saved):
            setattr(module, attr, old)
        from pyspark import TaskContext

        TaskContext._setTaskContext(None)
