"""A streaming query's checkpoint as the sink reads it, and what a batch consumed.

The sink reads three things from the query's checkpoint (Spark's files, wherever
``checkpointLocation`` puts them, through :mod:`kafka_eos_ds.storage`): the query id
(``metadata``), the batches Spark recorded as committed (``commits/``), and a batch's end
offsets (the offset log, ``offsets/<batchId>``).

With the sink option ``sourceGroupId``, each batch's end offsets are committed to that
consumer group *inside* the batch's first Kafka transaction. The group then always says
exactly where the output ends, so a query whose checkpoint was lost resumes with
``startingOffsets=group`` with no loss and no duplicate (docs/fault-tolerance.md, "The
checkpoint is lost").

Spark's offset log file: ``v1``, a line of batch metadata, then one line per source
(its offset JSON, or ``-`` for none). The query must have exactly one source, a Kafka
one (``{"topic": {"partition": offset}}``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.storage import Files, StorageOptions, checkpoint_files

OPTION = "sourceGroupId"


class Checkpoint:
    """One query's checkpoint directory, read through the store that holds it."""

    def __init__(self, location: str, store: Files, path: str) -> None:
        self.location = location
        self._store = store
        self._path = path.rstrip("/") or "/"

    @classmethod
    def at(cls, location: str | None, options: StorageOptions | None = None) -> "Checkpoint":
        """The checkpoint at ``location`` (ConfigError when there is none, or its scheme
        cannot be read)."""
        if not location:
            raise ConfigError(f"Option '{OPTION}' needs the query's 'checkpointLocation' (a streaming query); "
                              f"remove '{OPTION}' for batch writes.")
        return cls(location, *checkpoint_files(location, options or StorageOptions()))

    def _file(self, *parts: str) -> str:
        return "/".join([self._path, *parts]) if self._path != "/" else "/" + "/".join(parts)

    def query_id(self) -> str | None:
        """The query id Spark stored in ``metadata`` (None before it exists)."""
        try:
            return str(json.loads(self._store.read_text(self._file("metadata")).splitlines()[0])["id"])
        except (FileNotFoundError, ValueError, KeyError, IndexError):
            return None

    def latest_batch(self, log: str = "offsets") -> int:
        """The highest batch id in one of the logs (``offsets``, ``commits``); -1 if none."""
        return max((int(name) for name in self._store.list_names(self._file(log)) if name.isdigit()), default=-1)

    def end_offsets(self, batch_id: int) -> dict[str, dict[str, int]]:
        """Batch ``batch_id``'s end offsets ``{"topic": {"partition": offset}}`` from the offset log."""
        path = self._file("offsets", str(int(batch_id)))
        try:
            lines = self._store.read_text(path).splitlines()
        except OSError as exc:
            raise ConfigError(f"Option '{OPTION}': cannot read Spark's offset log {path}: {exc}.") from exc
        sources = [line for line in lines[2:] if line.strip()]
        if len(sources) != 1:
            raise ConfigError(f"Option '{OPTION}' needs a query with exactly one source (a kafka_eos source); "
                              f"batch {batch_id} has {len(sources)}. Remove '{OPTION}'.")
        return _kafka_offsets(sources[0], batch_id)

    def progress(self, group_id: str, batch_id: int) -> dict[str, Any]:
        """The JSON the decision carries: the group and the batch's end offsets."""
        return {"group": group_id, "offsets": self.end_offsets(batch_id)}


def _kafka_offsets(text: str, batch_id: int) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(text)
        ok = isinstance(data, dict) and data and all(
            isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int) for p, o in parts.items())
            for parts in data.values())
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"Option '{OPTION}' needs the query's source to be Kafka (format 'kafka_eos'); the "
                          f"offsets of batch {batch_id} are not Kafka offsets. Remove '{OPTION}'.")
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in data.items()}


def compare(progress: Mapping[str, Mapping[str, int]], group: Mapping[str, Mapping[str, int]]) -> bool | None:
    """Where the group's committed offsets stand against a batch's end offsets ``progress``.

    True: exactly there (the batch's first transaction, which carried them, committed).
    False: every partition at or before them, some before (it did not commit; the group
    holds an earlier batch's offsets). None: anything else — no offsets, or offsets
    beyond the batch — so it cannot be told.
    """
    behind = False
    for topic, parts in progress.items():
        for part, end in parts.items():
            at = group.get(topic, {}).get(str(part))
            if at is None or at > int(end):
                return None
            behind = behind or at < int(end)
    return not behind
