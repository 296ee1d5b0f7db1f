"""The file sink's :class:`~kafka_eos_ds.twophase.DecisionLog`: each writer's decisions
as numbered files in its staging directory (:mod:`.layout`),
``_kafka_eos/<writer>/decisions/<sequence>.json``, on the sink's own store.

A write creates the next number after the one this driver step last read, atomically
and only if it does not exist yet (``Store.put(new=True)``: on a local disk a temp file,
fsync, ``os.link`` to the numbered name, fsync of the directory; on HDFS a rename that
refuses an existing name; on S3 ``PutObject`` with ``If-None-Match: *``): a restarted
driver reads either the old or the new decision, never half of one, and a driver that
fell behind (presumed dead, then resumed) cannot put a stale decision over a newer one —
its number is taken, so its write fails. This is the file sink's counterpart of the
Kafka sink's fenced decision writer. The latest two numbers are kept.

The guard holds however far behind a driver is, though older numbers are pruned: a
write lists the directory after its put, and a write whose number is not the highest
there is refused (its file dropped again). Pruning never deletes the highest number, so
a number found free only because it was pruned always has a higher one beside it; a
write that finds none above its own created a number never used before, which every
later write must have read first (docs/dev/decisions.md, "The file decision log's
guard, at any lag"). Each record carries a mark of the step that wrote it, so a put
retried after its answer was lost (it took effect) finds its own record and succeeds.

Keeping the decisions beside the files, rather than in a Kafka topic, keeps a table whole
in its own directory: copying or moving it moves its commit history, and a new query
reads where the table ends from the table itself (:mod:`.resume`).
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from pathlib import PurePath

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.storage import Store
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.table_sink.handles import FileDecision, StagedFiles
from kafka_eos_ds.table_sink.layout import DECISIONS, IN_PROGRESS, PENDING, Layout, writer_dir
from kafka_eos_ds.twophase.protocol import DECIDED, Decision


class FileDecisionLog:
    """The commit decisions of each writer of one sink directory, as numbered JSON files.

    One instance is one driver step (a planner's recovery, a commit, an abort). ``read``:
    the number each writer's log had before the write staged anything (read by its
    planner, or by each task before its first file when the planner cannot name the
    writer; carried to the commit by the tasks' messages): the commit's decision goes
    right after it, so it is refused if anything was recorded since, a fencing claim
    among it."""

    def __init__(self, layout: Layout, store: Store | None = None, read: dict[str, int] | None = None) -> None:
        self.layout = layout
        self.store: Store = store or LocalStore()
        # The number this step last read or wrote, per writer directory.
        self._seen: dict[str, int] = dict(read or {})
        self._pinned = set(self._seen)  # read by the planner: a later read does not move it
        # Marks this step's records, so that a record found at the number it wrote is known
        # for its own (a retry after a lost answer), never for another driver's same decision.
        self._step = uuid.uuid4().hex
        self._lock = threading.Lock()
        self._claims: dict[str, int] = {}  # per writer: claims begun by this step

    def latest(self, key: str) -> FileDecision | None:
        writer = writer_dir(key)
        number, decision = self._newest(self.layout.decisions(key))
        if writer not in self._pinned:
            self._seen[writer] = number
        return decision

    def number(self, key: str) -> int | None:
        """The number of the writer's log this step last read or wrote (None: not read)."""
        return self._seen.get(writer_dir(key))

    def highest(self, writer: str) -> int:
        """The highest number in the log of writer directory ``writer`` now (0: none yet)."""
        return _highest(self.store, self.layout.writer(writer) / DECISIONS)

    def latest_of(self, kind: str) -> FileDecision | None:
        # Only asked by sinks whose streams share participant ids (the file sink's stage
        # apart); answered by modification time, which only a local disk gives cheaply.
        found = [(mtime, path) for path in self._writers(kind) if (mtime := _mtime(path / DECISIONS)) is not None]
        return self._newest(max(found)[1] / DECISIONS)[1] if found else None

    def decisions_of(self, kind: str) -> list[tuple[str, FileDecision]]:
        """``(key, latest decision)`` of every writer of ``kind`` that has one."""
        out = []
        for path in self._writers(kind):
            decision = self._newest(path / DECISIONS)[1]
            if decision is not None:
                out.append((f"{kind}:{decision.query_id}", decision))
        return out

    def unfinished(self, kind: str) -> list[tuple[str, FileDecision]]:
        return [(key, d) for key, d in self.decisions_of(kind) if d.state == DECIDED]

    def write(self, key: str, decision: FileDecision) -> None:
        writer = writer_dir(key)
        with self._lock:
            self._record(writer, {"key": key, **decision.to_json()})

    def observed(self, writer: str) -> int:
        """To be called once a step has listed staged files of ``writer`` it may delete:
        the ticket :meth:`claim` takes."""
        with self._lock:
            return self._claims.get(writer, 0)

    def claim(self, writer: str, ticket: int) -> None:
        """Before deleting staged files of ``writer`` listed before ``ticket``
        (:meth:`observed`): record the latest decision again under the next number, as
        this step's own (refused, TransactionError, if anything was recorded since this
        step read the log). No decision written before the claim goes unread by this
        step, and none written after it can name a file this step listed: a decision goes
        right after the number its planner read, before its tasks staged anything, so a
        write planned before the claim is refused, and one planned after it staged its
        files after the listing (docs/dev/decisions.md, "Fencing staged files against
        drivers that fell behind"; a write whose planner cannot name its writer goes right
        after the number its first task read before staging, "Every table-sink write's
        decision is pinned"). One claim serves every listing made before it."""
        with self._lock:
            if self._claims.get(writer, 0) > ticket:
                return
            directory = self.layout.writer(writer) / DECISIONS
            number, record = self._newest_record(directory)
            if self._seen.get(writer, number) != number:
                raise _fell_behind(directory)
            self._seen[writer] = number
            self._record(writer, record or {})
            self._claims[writer] = self._claims.get(writer, 0) + 1

    def _record(self, writer: str, record: dict[str, object]) -> None:
        directory = self.layout.writer(writer) / DECISIONS
        number = self._seen[writer] + 1 if writer in self._seen else self._newest(directory)[0] + 1
        data = json.dumps({**record, "step": self._step}, sort_keys=True).encode("utf-8")
        path = str(directory / _name(number))
        try:
            self.store.put(path, data, new=True)
        except FileExistsError:
            # This step's own put, retried after its answer was lost, finds its record there.
            if self._read(path) != data:
                raise _fell_behind(directory) from None
        names = self.store.list_names(str(directory))
        if max(_numbers(names)) > number:
            # The number was free only because it had been pruned: newer decisions exist,
            # and this one would be a stale record below them (module docstring). Dropped
            # again; readers, who read the highest number, never took it for the latest.
            self.store.delete(path)
            raise _fell_behind(directory)
        self._seen[writer] = number
        for old in names:
            stem, _, suffix = old.partition(".")
            if suffix == "json" and stem.isdigit() and int(stem) < number - 1:
                self.store.delete(str(directory / old))

    def _read(self, path: str) -> bytes | None:
        try:
            return self.store.read_text(path).encode("utf-8")
        except FileNotFoundError:  # pruned meanwhile: not this step's either way
            return None

    def forget(self, key: str) -> None:
        """Drop the writer's decisions and its staging directory once its files are gone (a
        finished job: one directory per job would pile up)."""
        writer = self.layout.writer(writer_dir(key))
        self.store.delete_tree(str(writer / DECISIONS))
        self._seen.pop(writer_dir(key), None)
        staged = [name for sub in (IN_PROGRESS, PENDING) for name in self.store.list_names(str(writer / sub))]
        if not staged:  # every file committed or fenced
            self.store.delete_tree(str(writer))

    def _writers(self, kind: str) -> list[PurePath]:
        return [self.layout.staging / name for name in self.store.list_names(str(self.layout.staging))
                if name.startswith(kind) and not name.startswith(".")]

    def _newest(self, directory: PurePath) -> tuple[int, FileDecision | None]:
        """The highest number in ``directory`` and its decision (0 and None when there is none)."""
        number, record = self._newest_record(directory)
        # A claim made before any decision holds no decision.
        return number, Decision.from_json(record, StagedFiles.from_json) if record and "state" in record else None

    def _newest_record(self, directory: PurePath) -> tuple[int, dict[str, object] | None]:
        missing = None
        while number := _highest(self.store, directory):
            try:
                record: dict[str, object] = json.loads(self.store.read_text(str(directory / _name(number))))
                return number, record
            except FileNotFoundError:
                # Gone between the listing and the read: pruned by a newer write (a higher
                # number is there now) or the whole log dropped (:meth:`forget`, another
                # job that finished its commit). Listed again; the same number listed and
                # gone twice is a store whose listing lies, not a race.
                if number == missing:
                    raise
                missing = number
        return 0, None


def _mtime(directory: PurePath) -> int | None:
    try:  # dropped since the listing (a finished job's log): none
        return os.stat(directory).st_mtime_ns
    except FileNotFoundError:
        return None


def _name(number: int) -> str:
    return f"{number:012d}.json"


def _highest(store: Store, directory: PurePath) -> int:
    return max(_numbers(store.list_names(str(directory))), default=0)


def _numbers(names: list[str]) -> list[int]:
    return [int(stem) for stem, _, suffix in (n.partition(".") for n in names) if suffix == "json" and stem.isdigit()]


def _fell_behind(directory: PurePath) -> TransactionError:
    return TransactionError(
        f"Another driver of this writer recorded a decision in '{directory}' since this one read it; "
        "this driver fell behind and stops (nothing it decided is recorded).", retriable=False)
