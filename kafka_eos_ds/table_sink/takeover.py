"""A new query taking over a table: what it does with the table's other streams.

A query whose checkpoint was lost never records its last decided batch done. The first
batch of every new query on the table (no decision of its own yet) commits such a batch
and publishes it (:func:`finish_other_streams`): decided is committed, whoever finishes
it, and a query resuming from the table's offsets (:mod:`.progress`) counts it as
written.

It does so once. The finishing query records it beside the dead query's staging,
``_kafka_eos/<writer>/finished/<batch>.json``, and every later new query skips a decided
batch recorded there: months later retention may have deleted its files (committing it
again would find them gone, a TransactionLostError for every new query, for good), or its
partition may have been dropped from the metastore on purpose (publishing it again would
bring it back). The decision log itself is never written for another query: that query
may still be running (two queries writing one table), and a decision written into its
log would make its own next write fail as "fell behind".

Once its first batch is done, the new query deletes what the streams it superseded left
staged (:func:`clean_superseded`: in-progress and pending files; on S3, open multipart
uploads), which no one else ever would: each writer cleans only its own staging, and a
dead query's never runs again. A stream is superseded when its latest decision is
finished and everything it recorded reading, the new query's first batch has read too
(it resumed from the table, or re-reads the same input): a query still writing those
partitions would write each record twice anyway. Whatever else is staged (a stream
reading other partitions, a query without offsets, foreachBatch, txnAppId or batch
writes), it names in a warning and leaves alone.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping, cast

from kafka_eos_ds.errors import KafkaEosError
from kafka_eos_ds.storage import Store
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import FileCommitter, FileDecision
from kafka_eos_ds.table_sink.layout import Layout, writer_dir
from kafka_eos_ds.table_sink.staging import StagedParticipants
from kafka_eos_ds.twophase.identity import Kind
from kafka_eos_ds.twophase.protocol import DECIDED

log = logging.getLogger(__name__)

FINISHED = "finished"


def finish_other_streams(committer: FileCommitter, layout: Layout, store: Store, query: str) -> None:
    """Commit and publish, once, what the table's other streams decided and never
    recorded done (module docstring)."""
    for key, decision in committer.decisions.unfinished(Kind.STREAM.value):
        if decision.query_id == query or _finished(layout, store, key, decision):
            continue
        log.warning("committing batch %s of query %s, decided but never recorded done", decision.batch_id,
                    decision.query_id)
        committer.commit_decided(decision)
        if committer.publish is not None:
            committer.publish(decision)
        _record_finished(layout, store, key, decision, query)


def _marker(layout: Layout, key: str, batch: int) -> str:
    return str(layout.writer(writer_dir(key)) / FINISHED / f"{batch:012d}.json")


def _finished(layout: Layout, store: Store, key: str, decision: FileDecision) -> bool:
    return store.exists(_marker(layout, key, decision.batch_id))


def _record_finished(layout: Layout, store: Store, key: str, decision: FileDecision, query: str) -> None:
    """Record ``decision`` finished by ``query``; only the newest batch's record is kept
    (a decided batch is the writer's latest decision: an older one is never asked for)."""
    data = json.dumps({"queryId": decision.query_id, "batchId": decision.batch_id, "finishedBy": query}).encode()
    try:
        store.put(_marker(layout, key, decision.batch_id), data, new=True)
    except FileExistsError:
        pass  # another new query finished it too, at the same time: recorded once is enough
    directory = layout.writer(writer_dir(key)) / FINISHED
    for name in store.list_names(str(directory)):
        stem, _, suffix = name.partition(".")
        if suffix == "json" and stem.isdigit() and int(stem) < decision.batch_id:
            store.delete(str(directory / name))


def takes_over(committer: FileCommitter, key: str) -> bool:
    """Whether the stream ``key`` has no decision on the table yet: its batch about to be
    committed is its first (False when that cannot be read now: the clean-up is skipped,
    never the batch failed for it)."""
    try:
        return committer.decisions.latest(key) is None
    except (KafkaEosError, OSError) as exc:
        log.info("could not read %s's decisions (the clean-up of superseded queries is skipped): %s", key, exc)
        return False


def clean_superseded(committer: FileCommitter, layout: Layout, store: Store, query: str,
                     progress: Mapping[str, Any] | None) -> None:
    """After query ``query``'s first batch (which read up to ``progress``) is done: delete
    what the streams it superseded left staged, and name in a warning what it leaves
    (module docstring). Best effort: the batch is committed whatever happens here."""
    decisions = cast(FileDecisionLog, committer.decisions)
    staging = cast(StagedParticipants, committer.participants)
    try:
        staged = staging.staged()
        streams = {writer_dir(key): (key, decision) for key, decision in decisions.decisions_of(Kind.STREAM.value)}
        ours = writer_dir(f"{Kind.STREAM.value}:{query}")
        left = []
        for writer, ids in sorted(staged.items()):
            if writer == ours:
                continue
            key, decision = streams.get(writer, (None, None))
            why = _why_kept(layout, store, key, decision, progress)
            # Read again just before deleting: a decision written since (a query still
            # running) keeps its staging.
            if why is None and key is not None and decisions.latest(key) == decision:
                log.warning("deleting what query %s left staged (%d file(s) or upload(s)); this query superseded it",
                            decision.query_id if decision else writer, len(ids))
                for participant_id in ids:
                    staging.fence(participant_id)
            else:
                left.append(f"{writer} ({len(ids)}: {why or 'it decided again meanwhile'})")
        if left:
            log.warning("left staged in '%s', for their own writers to clean: %s", layout.staging, "; ".join(left))
    except (KafkaEosError, OSError) as exc:
        log.warning("could not clean what superseded queries left staged in '%s': %s", layout.staging, exc)


def _why_kept(layout: Layout, store: Store, key: str | None, decision: FileDecision | None,
              progress: Mapping[str, Any] | None) -> str | None:
    """Why a writer's staging is not this query's to delete (None: it is)."""
    if key is None or decision is None:
        return "not a stream with a decision: foreachBatch, txnAppId or batch writes, or a query that decided nothing"
    if decision.state == DECIDED and not _finished(layout, store, key, decision):
        return f"batch {decision.batch_id} of query {decision.query_id} is decided and not finished"
    theirs = (decision.progress or {}).get("offsets") or {}
    ours = (progress or {}).get("offsets") or {}
    if not theirs or not ours:
        return f"query {decision.query_id} or this query recorded no Kafka offsets"
    ahead = [f"{topic}-{part}" for topic, parts in theirs.items() for part, end in parts.items()
             if int(ours.get(topic, {}).get(part, -1)) < int(end)]
    if ahead:
        return f"query {decision.query_id} read {', '.join(sorted(ahead))} further than this query"
    return None
