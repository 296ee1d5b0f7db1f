"""The file sink's :class:`~kafka_eos_ds.twophase.DecisionLog`: each writer's decisions
as numbered files in its staging directory (:mod:`.layout`),
``_kafka_eos/<writer>/decisions/<sequence>.json``.

A write creates the next number after the one this driver step last read, atomically
and only if it does not exist yet (a temp file, fsync, ``os.link`` to the numbered name,
fsync of the directory): a restarted driver reads either the old or the new decision,
never half of one, and a driver that fell behind (presumed dead, then resumed) cannot
put a stale decision over a newer one — its number is taken, so its write fails. This is
the file sink's counterpart of the Kafka sink's fenced decision writer. The latest two
numbers are kept.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Optional

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.filesink.layout import DECISIONS, Layout, fsync_dir, writer_dir
from kafka_eos_ds.twophase.protocol import DECIDED, Decision


class FileDecisionLog:
    """The commit decisions of each writer of one sink directory, as numbered JSON files."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._seen: dict[str, int] = {}  # the number this step last read or wrote, per writer

    def latest(self, key: str) -> Optional[Decision]:
        number, decision = _newest(self.layout.decisions(key))
        self._seen[key] = number
        return decision

    def latest_of(self, kind: str) -> Optional[Decision]:
        found = [(path.stat().st_mtime_ns, path) for path in self._writers(kind)
                 if (path / DECISIONS).is_dir()]
        return _newest(max(found)[1] / DECISIONS)[1] if found else None

    def unfinished(self, kind: str) -> list[tuple[str, Decision]]:
        out = []
        for path in self._writers(kind):
            decision = _newest(path / DECISIONS)[1]
            if decision is not None and decision.state == DECIDED:
                out.append((f"{kind}:{decision.query_id}", decision))
        return out

    def write(self, key: str, decision: Decision) -> None:
        directory = self.layout.decisions(key)
        directory.mkdir(parents=True, exist_ok=True)
        number = self._seen[key] + 1 if key in self._seen else _newest(directory)[0] + 1
        temp = directory / f".{uuid.uuid4().hex}.tmp"
        with open(temp, "w") as f:
            json.dump({"key": key, **decision.to_json()}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temp, directory / _name(number))
        except FileExistsError:
            raise TransactionError(
                f"Another driver of this writer recorded a decision in '{directory}' since this one read it; "
                "this driver fell behind and stops (nothing it decided is recorded).", retriable=False) from None
        finally:
            temp.unlink(missing_ok=True)
        fsync_dir(directory)
        self._seen[key] = number
        for old in directory.glob("*.json"):
            if old.stem.isdigit() and int(old.stem) < number - 1:
                old.unlink(missing_ok=True)

    def forget(self, key: str) -> None:
        """Drop the writer's decisions and its staging directory once its files are gone (a
        finished job: one directory per job would pile up)."""
        writer = self.layout.writer(writer_dir(key))
        shutil.rmtree(writer / DECISIONS, ignore_errors=True)
        self._seen.pop(key, None)
        if not writer.is_dir():
            return
        staged = [path for sub in writer.iterdir() if sub.is_dir() for path in sub.iterdir()]
        if not staged:  # every file committed or fenced
            shutil.rmtree(writer, ignore_errors=True)
            fsync_dir(self.layout.staging)

    def _writers(self, kind: str) -> list[Path]:
        if not self.layout.staging.is_dir():
            return []
        return [d for d in self.layout.staging.iterdir() if d.is_dir() and d.name.startswith(kind)]


def _name(number: int) -> str:
    return f"{number:012d}.json"


def _newest(directory: Path) -> tuple[int, Optional[Decision]]:
    """The highest number in ``directory`` and its decision (0 and None when there is none)."""
    try:
        numbers = [int(p.stem) for p in directory.iterdir() if p.suffix == ".json" and p.stem.isdigit()]
    except FileNotFoundError:
        return 0, None
    if not numbers:
        return 0, None
    number = max(numbers)
    return number, Decision.from_json(json.loads((directory / _name(number)).read_text()))
