"""A streaming query's checkpoint as both sinks read it.

A sink reads three things from the query's checkpoint (Spark's files, wherever
``checkpointLocation`` puts them, through :mod:`kafka_eos_ds.storage`): the query id
(``metadata``), the batches Spark recorded as committed (``commits/``), and a batch's end
offsets (the offset log, ``offsets/<batchId>``). The Kafka sink commits those offsets to
its ``sourceGroupId`` group and the table sink keeps them in each batch's decision; each
names its own option in what it tells the user (``option``).

Spark's offset log file: ``v1``, a line of batch metadata, then one line per source (its
offset JSON, or ``-`` for none). Offsets are read from a query with exactly one source, a
Kafka one (``{"topic": {"partition": offset}}``).
"""

from __future__ import annotations

import json
from typing import Any

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.storage import Files, StorageOptions, checkpoint_files


class Checkpoint:
    """One query's checkpoint directory, read through the store that holds it, for the
    option ``option`` (None: the sink's own need, no option to name)."""

    def __init__(self, location: str, store: Files, path: str, option: str | None = None) -> None:
        self.location = location
        self.option = option
        self._store = store
        self._path = path.rstrip("/") or "/"

    @classmethod
    def at(cls, location: str | None, options: StorageOptions | None = None, *,
           option: str | None = None) -> "Checkpoint":
        """The checkpoint at ``location`` (ConfigError when there is none, or its scheme
        cannot be read)."""
        if not location:
            remedy = f"; remove '{option}' for batch writes" if option else ""
            raise ConfigError(f"{cls._needs(option)} the query's 'checkpointLocation' (a streaming query){remedy}.")
        return cls(location, *checkpoint_files(location, options or StorageOptions()), option=option)

    @staticmethod
    def _needs(option: str | None) -> str:
        return f"Option '{option}' needs" if option else "Reading a batch's source offsets needs"

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
        remedy = f" Remove '{self.option}'." if self.option else ""
        try:
            lines = self._store.read_text(path).splitlines()
        except OSError as exc:
            where = f"Option '{self.option}': cannot" if self.option else "Cannot"
            raise ConfigError(f"{where} read Spark's offset log {path}: {exc}.") from exc
        sources = [line for line in lines[2:] if line.strip()]
        if len(sources) != 1:
            raise ConfigError(f"{self._needs(self.option)} a query with exactly one source (a kafka_eos source); "
                              f"batch {batch_id} has {len(sources)}.{remedy}")
        offsets = _kafka_offsets(sources[0])
        if offsets is None:
            raise ConfigError(f"{self._needs(self.option)} the query's source to be Kafka (format 'kafka_eos'); "
                              f"the offsets of batch {batch_id} are not Kafka offsets.{remedy}")
        return offsets

    def progress(self, group_id: str, batch_id: int) -> dict[str, Any]:
        """The JSON a Kafka sink's decision carries: the group and the batch's end offsets."""
        return {"group": group_id, "offsets": self.end_offsets(batch_id)}


def _kafka_offsets(text: str) -> dict[str, dict[str, int]] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(data, dict) and data and all(
            isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int) for p, o in parts.items())
            for parts in data.values())):
        return None
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
