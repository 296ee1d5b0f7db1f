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
import uuid
from pathlib import PurePath

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.filesink.layout import DECISIONS, IN_PROGRESS, PENDING, Layout, writer_dir
from kafka_eos_ds.storage import Store
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.twophase.protocol import DECIDED, Decision


class FileDecisionLog:
    """The commit decisions of each writer of one sink directory, as numbered JSON files."""

    def __init__(self, layout: Layout, store: Store | None = None) -> None:
        self.layout = layout
        self.store: Store = store or LocalStore()
        self._seen: dict[str, int] = {}  # the number this step last read or wrote, per writer
        # Marks this step's records, so that a record found at the number it wrote is known
        # for its own (a retry after a lost answer), never for another driver's same decision.
        self._step = uuid.uuid4().hex

    def latest(self, key: str) -> Decision | None:
        number, decision = self._newest(self.layout.decisions(key))
        self._seen[key] = number
        return decision

    def latest_of(self, kind: str) -> Decision | None:
        # Only asked by sinks whose streams share participant ids (the file sink's stage
        # apart); answered by modification time, which only a local disk gives cheaply.
        found = [(os.stat(path / DECISIONS).st_mtime_ns, path) for path in self._writers(kind)
                 if os.path.isdir(path / DECISIONS)]
        return self._newest(max(found)[1] / DECISIONS)[1] if found else None

    def decisions_of(self, kind: str) -> list[tuple[str, Decision]]:
        """``(key, latest decision)`` of every writer of ``kind`` that has one."""
        out = []
        for path in self._writers(kind):
            decision = self._newest(path / DECISIONS)[1]
            if decision is not None:
                out.append((f"{kind}:{decision.query_id}", decision))
        return out

    def unfinished(self, kind: str) -> list[tuple[str, Decision]]:
        return [(key, d) for key, d in self.decisions_of(kind) if d.state == DECIDED]

    def write(self, key: str, decision: Decision) -> None:
        directory = self.layout.decisions(key)
        number = self._seen[key] + 1 if key in self._seen else self._newest(directory)[0] + 1
        data = json.dumps({"key": key, "step": self._step, **decision.to_json()}, sort_keys=True).encode("utf-8")
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
            self.store.delete(str(directory / _name(number)))
            raise _fell_behind(directory)
        self._seen[key] = number
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
        self._seen.pop(key, None)
        staged = [name for sub in (IN_PROGRESS, PENDING) for name in self.store.list_names(str(writer / sub))]
        if not staged:  # every file committed or fenced
            self.store.delete_tree(str(writer))

    def _writers(self, kind: str) -> list[PurePath]:
        return [self.layout.staging / name for name in self.store.list_names(str(self.layout.staging))
                if name.startswith(kind) and not name.startswith(".")]

    def _newest(self, directory: PurePath) -> tuple[int, Decision | None]:
        """The highest number in ``directory`` and its decision (0 and None when there is none)."""
        numbers = _numbers(self.store.list_names(str(directory)))
        if not numbers:
            return 0, None
        number = max(numbers)
        return number, Decision.from_json(json.loads(self.store.read_text(str(directory / _name(number)))))


def _name(number: int) -> str:
    return f"{number:012d}.json"


def _numbers(names: list[str]) -> list[int]:
    return [int(stem) for stem, _, suffix in (n.partition(".") for n in names) if suffix == "json" and stem.isdigit()]


def _fell_behind(directory: PurePath) -> TransactionError:
    return TransactionError(
        f"Another driver of this writer recorded a decision in '{directory}' since this one read it; "
        "this driver fell behind and stops (nothing it decided is recorded).", retriable=False)
