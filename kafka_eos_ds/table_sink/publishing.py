"""What a committed batch announces beyond its files: a ``_SUCCESS`` marker in each
partition it wrote into (option ``successFile``), and those partitions in the Hive
metastore (options ``table`` and ``hive.metastore.uris``; :mod:`.metastore`).

Both run as the committer's ``publish`` step: after every file of the batch is final,
before the batch is recorded done, and again by a restart that finishes the batch, so
each is idempotent (a marker is an empty file written over itself; partitions are added
``ifNotExists``). A marker is rewritten each time a batch adds files to its partition:
it says the partition holds committed files, not that its time span is complete. The
partitions are also registered before the batch's decision (:func:`register_partitions`),
so that a refusal comes while nothing of the batch is decided or final.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.handles import FileDecision, FileParticipant, partitions_of
from kafka_eos_ds.table_sink.metastore import Metastore
from kafka_eos_ds.table_sink.staging import staging_of

if TYPE_CHECKING:
    from kafka_eos_ds.storage import Store

SUCCESS = "_SUCCESS"


def metastore_of(config: FileSinkConfig) -> Metastore | None:
    table = config.table
    return Metastore(table.database, table.name, table.uris, config.uri) if table is not None else None


def publisher(config: FileSinkConfig, store: Store) -> Callable[[FileDecision], None] | None:
    """The publish step of the sink's committer (None: nothing to announce); ``store``
    holds the table (the sink's)."""
    metastore = metastore_of(config)
    if metastore is None and not config.success_file:
        return None

    def publish(decision: FileDecision) -> None:
        directories = _directories(decision.participants)
        if config.success_file:
            layout = config.layout
            for directory in directories:
                store.put(str(layout.root / directory / SUCCESS if directory else layout.root / SUCCESS), b"")
        if metastore is not None:
            # Every directory holds the batch's final files by now: nothing to create first.
            metastore.register(directories)

    return publish


def prepare_table(config: FileSinkConfig, schema: Any, store: Store) -> None:
    """Before anything is written: the metastore answers, and the table exists (created
    from ``schema`` if missing) with the sink's partition columns. The table's directory is
    made first, as a partition's is (:func:`register_partitions`): a metastore that makes
    it deletes it again when the creation clashes with another writer's."""
    metastore = metastore_of(config)
    if metastore is not None:
        staging_of(store).prepare_directories(config.layout.root, [""])
        metastore.ensure_table(schema, config.partitioning)


def register_partitions(config: FileSinkConfig, store: Store, participants: Sequence[FileParticipant]) -> None:
    """Before a batch's decision: the partitions its files go into, registered. A partition
    the metastore refuses (a name pattern, a value too long for its database) refuses the
    batch while nothing of it is decided or final; once decided, a refusal would leave its
    files final and every restart failing to publish them. An empty registered partition
    shows no rows: its files appear as they become final.

    Each directory is created first: a Hive metastore that creates a partition's directory
    itself deletes it again, with everything in it, when the add then fails, as it does
    when another writer registers the same new partition at once; the other writer's final
    files may be in it by then (measured on the embedded metastore: 36 of 144 rows gone, no
    error). A directory it found there it leaves alone. S3 has no directories to create
    (docs/dev/decisions.md, "A new partition's directory is created before the metastore
    registers it")."""
    metastore = metastore_of(config)
    if metastore is None:
        return
    directories = _directories(participants)
    staging_of(store).prepare_directories(config.layout.root, directories)
    metastore.register(directories)


def _directories(participants: Sequence[FileParticipant]) -> list[str]:
    return partitions_of([p for p in participants if p.records])
