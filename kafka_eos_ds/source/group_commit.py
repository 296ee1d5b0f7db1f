"""Lag commits: the consumed offsets of each finished batch, committed to a consumer group.

Spark's checkpoint stays the source of truth for where the query is; the group commit
exists so that ``kafka-consumer-groups --describe``, Burrow and lag exporters see the
query's progress. It is therefore best effort: a failed commit is logged (with the group
and the offsets) and never fails the query. The committing consumer never joins the
group (no subscribe), so the commit is accepted while the group has no active members;
a group that other, active consumers use rejects it — give the query its own group.
"""

from __future__ import annotations

import logging

from kafka_eos_ds.kafka.clients import ConsumerLike
from kafka_eos_ds.source.offsets import Offsets

log = logging.getLogger(__name__)


class GroupOffsetCommitter:
    """Commit ``{(topic, partition): next_offset}`` to ``group_id`` with ``consumer``."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.last_error: str | None = None

    def commit(self, consumer: ConsumerLike, offsets: Offsets) -> bool:
        from confluent_kafka import TopicPartition

        if not offsets:
            return True
        request = [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items()) if off >= 0]
        try:
            result = consumer.commit(offsets=request, asynchronous=False)
            failed = [tp for tp in (result or []) if tp.error is not None]
            if failed:
                raise RuntimeError("; ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed))
        except Exception as exc:  # best effort by design: lag reporting must not stop the query
            self.last_error = str(exc)
            log.warning("Could not commit offsets %s to consumer group %r (lag tools will lag behind; "
                        "the query is unaffected): %s", _show(offsets), self.group_id, exc)
            return False
        self.last_error = None
        return True


def _show(offsets: Offsets) -> str:
    return ", ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items()))
