"""What each batch of a stream consumed, kept in the table with the batch's decision, and
where a new query resumes from it when the old query's checkpoint is lost.

A streaming query's batch N ends at the offsets Spark wrote to the checkpoint's offset log
(``offsets/N``) before running it. The file sink copies them into batch N's decision
(``progress``: ``{"offsets": {topic: {partition: end}}}``, when the query's one source
is a kafka_eos source). The decision is the commit point of the files: once it exists the
batch's files become final, whoever finishes it. So the newest decision of each query
that wrote the table says exactly where the table ends, in Kafka's terms.

A new query (its checkpoint lost, or a new one on purpose) resumes there with the source
option ``startingOffsetsFromTable`` = the table's path: per topic-partition, the furthest
end offset any stream recorded in the table (a partition no decision names starts at the
earliest offset, as ``startingOffsets=group`` does). The new query's sink finishes, before
its first batch's tasks, every decided batch of the table's other streams that was never
recorded done (:meth:`~.sink.FileSink.prepare`): the resumed offsets count those
batches as written, so their files must be final.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.storage import Files, StorageOptions
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_ds.table_sink.handles import FileDecision, FileParticipant
from kafka_eos_ds.twophase.identity import Kind
from kafka_eos_ds.twophase.protocol import ABANDONED, DECIDED, DONE

log = logging.getLogger(__name__)

OPTION = "startingOffsetsFromTable"


def batch_offsets(checkpoint: str | None, storage: StorageOptions, batch_id: int) -> dict[str, Any] | None:
    """The progress batch ``batch_id`` of a stream records (None: the query's source is not
    one kafka_eos source, or its offset log cannot be read; the table then cannot be
    resumed from, which the resuming query is told)."""
    if not checkpoint:
        return None
    try:
        return {"offsets": Checkpoint.at(checkpoint, storage).end_offsets(batch_id)}
    except ConfigError as exc:
        log.info("batch %s records no source offsets in the table: %s", batch_id, exc)
        return None


class RecordedProgress:
    """The committer's progress store for files: the progress is part of the decision file
    itself, so there is nothing to attach it to, and a decided batch is committed whoever
    finishes it (no "did it start" question: streams stage apart, never replacing another
    query's decision)."""

    def carry(self, progress: Mapping[str, Any], participant: FileParticipant | None) -> None:
        pass

    def started(self, progress: Mapping[str, Any], first: FileParticipant) -> bool | None:
        return True

    def unknown_message(self, progress: Mapping[str, Any], first: FileParticipant) -> str:
        return ""

    def abandoned_message(self, progress: Mapping[str, Any], first: FileParticipant) -> str:
        return ""  # never asked: started() is always True

    def resumes_before(self, progress: Mapping[str, Any], reached: bool = True) -> str | None:
        return None


def table_end(location: str, options: Mapping[str, Any]) -> dict[tuple[str, int], int]:
    """Per ``(topic, partition)``, the end offset of the furthest batch any stream decided
    in the table at ``location`` (``options``: how to reach its store, Hadoop's ``fs.*``
    names). Empty for a table nothing was written to yet; refused (ConfigError) when some of
    the table was written without offsets: by writes inside foreachBatch or with
    ``txnAppId``, or only by batch jobs."""
    from kafka_eos_ds.table_sink.config import FileSinkConfig
    from kafka_eos_ds.table_sink.decision_log import FileDecisionLog

    try:
        config = FileSinkConfig.from_options({**{k: v for k, v in options.items()
                                                 if str(k).lower().startswith(("fs.", "dfs.", "hadoop."))},
                                              "path": location})
    except ConfigError as exc:
        raise ConfigError(f"Option '{OPTION}' = {location!r}: {exc}") from exc
    decisions = FileDecisionLog(config.layout, config.store())
    ends: dict[tuple[str, int], int] = {}
    without = []
    for _key, decision in decisions.decisions_of(Kind.STREAM.value):
        if decision.state not in (DECIDED, DONE):
            continue
        offsets = (decision.progress or {}).get("offsets")
        if not offsets:
            without.append(f"query {decision.query_id} (batch {decision.batch_id})")
            continue
        for topic, parts in offsets.items():
            for part, end in parts.items():
                tp = (str(topic), int(part))
                ends[tp] = max(ends.get(tp, 0), int(end))
    # Writes inside foreachBatch and txnAppId writes record no offsets: where they end in
    # Kafka is unknown whatever the streams recorded. A batch job beside a stream is taken
    # for a backfill, outside the stream's input; without any stream, it is all there is.
    without += [_writer_name(kind, decision) for kind in (Kind.FOREACH, Kind.APP) + (() if ends else (Kind.JOB,))
                for _key, decision in decisions.decisions_of(kind.value) if decision.state != ABANDONED]
    if without:
        raise ConfigError(f"Option '{OPTION}': the table at {location!r} was written by "
                          f"{', '.join(without)} without Kafka offsets in its decisions (only a streaming query "
                          "writing with writeStream.format('kafka_eos_file') from one kafka_eos source records them), "
                          "so where it ends in Kafka is not known. Use 'startingOffsets' instead, with the offsets "
                          "after the last records the table holds.")
    if not ends and _holds_files(config.store(), str(config.layout.root)):
        raise ConfigError(f"Option '{OPTION}': the table at {location!r} holds files but no streaming query's "
                          "decision with Kafka offsets (they were written by batch jobs, or by something else), so "
                          "where it ends in Kafka is not known. Use 'startingOffsets' instead, with the offsets "
                          "after the last records the table holds.")
    return ends


def _writer_name(kind: Kind, decision: FileDecision) -> str:
    if kind is Kind.FOREACH:
        return f"the foreachBatch writes of query {decision.query_id} (micro-batch {decision.batch_id})"
    if kind is Kind.APP:
        return f"txnAppId {decision.query_id!r} (txnVersion {decision.batch_id})"
    return f"batch job {decision.query_id}"


def _holds_files(store: Files, directory: str) -> bool:
    """Whether a final file is in the table's root or any partition directory under it
    (names starting with ``_`` or ``.`` are the sink's own and markers; stops at the first)."""
    for name in store.list_names(directory):
        if name.startswith(("_", ".")):
            continue
        if "=" in name:
            if _holds_files(store, f"{directory.rstrip('/')}/{name}"):
                return True
        else:
            return True
    return False
