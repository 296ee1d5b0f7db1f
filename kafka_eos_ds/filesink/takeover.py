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
"""

from __future__ import annotations

import json
import logging

from kafka_eos_ds.filesink.layout import Layout, writer_dir
from kafka_eos_ds.storage import Store
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.identity import Kind
from kafka_eos_ds.twophase.protocol import Decision

log = logging.getLogger(__name__)

FINISHED = "finished"


def finish_other_streams(committer: TwoPhaseCommitter, layout: Layout, store: Store, query: str) -> None:
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


def _finished(layout: Layout, store: Store, key: str, decision: Decision) -> bool:
    return store.exists(_marker(layout, key, decision.batch_id))


def _record_finished(layout: Layout, store: Store, key: str, decision: Decision, query: str) -> None:
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

