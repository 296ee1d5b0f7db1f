"""What a batch consumed, read from the query's checkpoint, to commit with the batch.

With the sink option ``sourceGroupId``, each batch's end offsets (Spark's offset log,
``<checkpoint>/offsets/<batchId>``) are committed to that consumer group *inside* the
batch's first Kafka transaction. The group then always says exactly where the output
ends, so a query whose checkpoint was lost resumes with ``startingOffsets=group`` with no
loss and no duplicate (docs/fault-tolerance.md, "The checkpoint is lost").

Spark's offset log file: ``v1``, a line of batch metadata, then one line per source
(its offset JSON, or ``-`` for none). The query must have exactly one source, a Kafka
one (``{"topic": {"partition": offset}}``). Only local checkpoints (a path or
``file:`` URI) can be read here: the driver-side writer runs in a Python process
without Hadoop file systems.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import urlparse

from kafka_eos_ds.errors import ConfigError

OPTION = "sourceGroupId"


def checkpoint_dir(location: Optional[str]) -> Path:
    """The local directory of ``checkpointLocation``; ConfigError when it is not local."""
    if not location:
        raise ConfigError(f"Option '{OPTION}' needs the query's 'checkpointLocation' (a streaming query); "
                          f"remove '{OPTION}' for batch writes.")
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        raise ConfigError(f"Option '{OPTION}' needs a local checkpointLocation (a path or file: URI), got "
                          f"scheme '{parsed.scheme}'. Use a local (or mounted) checkpoint, or remove '{OPTION}'.")
    return Path(parsed.path if parsed.scheme else location)


def local_checkpoint(location: Optional[str]) -> Optional[Path]:
    """The local directory of ``checkpointLocation``; None when there is none or it is not local."""
    if not location:
        return None
    parsed = urlparse(location)
    return Path(parsed.path if parsed.scheme else location) if parsed.scheme in ("", "file") else None


def query_id(checkpoint: Path) -> Optional[str]:
    """The query id Spark stored in ``<checkpoint>/metadata`` (None before it exists)."""
    try:
        return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def latest_batch(checkpoint: Path, log: str = "offsets") -> int:
    """The highest batch id in one of the checkpoint's logs (``offsets``, ``commits``); -1 if none."""
    try:
        return max((int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit()), default=-1)
    except OSError:
        return -1


def end_offsets(checkpoint: Path, batch_id: int) -> dict[str, dict[str, int]]:
    """Batch ``batch_id``'s end offsets ``{"topic": {"partition": offset}}`` from the offset log."""
    path = checkpoint / "offsets" / str(int(batch_id))
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"Option '{OPTION}': cannot read Spark's offset log {path}: {exc}.") from exc
    sources = [line for line in lines[2:] if line.strip()]
    if len(sources) != 1:
        raise ConfigError(f"Option '{OPTION}' needs a query with exactly one source (a kafka_eos source); "
                          f"batch {batch_id} has {len(sources)}. Remove '{OPTION}'.")
    return _kafka_offsets(sources[0], batch_id)


def progress(group_id: str, checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """The JSON the decision carries: the group and the batch's end offsets."""
    return {"group": group_id, "offsets": end_offsets(checkpoint, batch_id)}


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


def compare(progress: Mapping[str, Mapping[str, int]], group: Mapping[str, Mapping[str, int]]) -> Optional[bool]:
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
