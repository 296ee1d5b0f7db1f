"""Transactional ids of the sink: built and parsed here, and only here.

An id is ``{prefix}-{partitionId}-{attemptNumber}``. The set is bounded (Spark's
partition count times its task attempts) and predictable, so recovery can recognise
every id the sink may have used, even after the number of tasks changed. Different
attempts of one task get different ids, so a retry never fences its predecessor by
accident; the driver fences the lower attempts on purpose when a batch commits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from kafka_eos_ds.errors import ConfigError

# Kafka accepts any string as a transactional id; the prefix is restricted to the
# characters of topic names so ids stay readable in broker tools and parse unambiguously.
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True, order=True)
class TransactionalId:
    """One transactional id of a sink: ``prefix``, Spark ``partition`` and ``attempt``."""

    prefix: str
    partition: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.prefix}-{self.partition}-{self.attempt}"


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise ConfigError(
            f"Option 'transactionalIdPrefix' must be 1-200 characters of letters, digits, '.', '_' "
            f"or '-'; got {prefix!r}. Use a name unique to this query, e.g. 'orders-etl'."
        )
    return prefix


def build(prefix: str, partition: int, attempt: int) -> str:
    """The transactional id of task ``partition``, attempt ``attempt``."""
    return str(TransactionalId(prefix, int(partition), int(attempt)))


def parse(prefix: str, transactional_id: str) -> Optional[TransactionalId]:
    """The parts of ``transactional_id`` if it belongs to ``prefix``, else None.

    An id of another sink whose prefix merely starts with ours (``orders-etl-2`` vs
    ``orders-etl``) does not parse: exactly two numeric fields must follow the prefix.
    """
    head = prefix + "-"
    if not transactional_id.startswith(head):
        return None
    rest = transactional_id[len(head):].split("-")
    if len(rest) != 2 or not all(part.isdigit() for part in rest):
        return None
    return TransactionalId(prefix, int(rest[0]), int(rest[1]))


def lower_attempts(prefix: str, partition: int, attempt: int) -> list[str]:
    """Ids of the attempts of ``partition`` that came before ``attempt``."""
    return [build(prefix, partition, a) for a in range(int(attempt))]


def pattern(prefix: str) -> str:
    """A regular expression matching exactly the ids of ``prefix`` (ListTransactions filter)."""
    return "^" + re.escape(prefix) + r"-[0-9]+-[0-9]+$"


def decision_writer(prefix: str) -> str:
    """The transactional id of the sink's commit-log writer, ``{prefix}.decisions``.

    One per sink, so a new driver's writer fences a stalled one. It never parses as a
    task's id nor matches :func:`pattern`: a '.' follows the prefix, not '-'.
    """
    return f"{prefix}.decisions"
