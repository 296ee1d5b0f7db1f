"""Transactional ids of the sink: built and parsed here, and only here.

A stream's own sink uses ``{prefix}:s{run}-{partitionId}-{attemptNumber}``, one family
per run of the query (``{prefix}-{partitionId}-{attemptNumber}`` before the run was part
of it, or when Spark does not tell the run). Within a run the set is bounded (Spark's
partition count times its task attempts) and predictable, so recovery can recognise every
id the sink may have used, even after the number of tasks changed.
Different attempts of one task get different ids, so a retry never fences its
predecessor by accident; the driver fences the lower attempts on purpose when a batch
commits.

``df.write`` jobs and writes inside ``foreachBatch`` use ids of their own *family*
(:mod:`kafka_eos_ds.twophase.identity`): ``{prefix}:{family}-{partitionId}-{attempt}``.
Writers sharing a prefix therefore never open, list or fence each other's transactions.
A family is per stream run (foreachBatch), per app id (``txnAppId``) or per job, so the
ids a prefix ever uses stay bounded by what runs, not by how many batches run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.twophase.identity import alternatives, matches

# Kafka accepts any string as a transactional id; the prefix is restricted to the
# characters of topic names so ids stay readable in broker tools and parse unambiguously
# (':' never occurs in a prefix, so "p:f1-0-0" is a family of "p", never a stream of "p:f1").
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_FAMILY = re.compile(r"^[a-z][0-9a-f]{1,32}$")


@dataclass(frozen=True, order=True)
class TransactionalId:
    """One transactional id of a sink: ``prefix``, ``family`` ('' for a stream's own sink),
    Spark ``partition`` and ``attempt``."""

    prefix: str
    family: str
    partition: int
    attempt: int

    def __str__(self) -> str:
        head = f"{self.prefix}:{self.family}" if self.family else self.prefix
        return f"{head}-{self.partition}-{self.attempt}"


def check_prefix(prefix: str) -> str:
    if not _PREFIX.match(prefix):
        raise ConfigError(
            f"Option 'transactionalIdPrefix' must be 1-200 characters of letters, digits, '.', '_' "
            f"or '-'; got {prefix!r}. Use a name unique to this query, e.g. 'orders-etl'."
        )
    return prefix


def build(prefix: str, partition: int, attempt: int, family: str = "") -> str:
    """The transactional id of task ``partition``, attempt ``attempt``, in ``family``."""
    return str(TransactionalId(prefix, family, int(partition), int(attempt)))


def parse(prefix: str, transactional_id: str) -> TransactionalId | None:
    """The parts of ``transactional_id`` if it belongs to ``prefix``, else None.

    An id of another sink whose prefix merely starts with ours (``orders-etl-2`` vs
    ``orders-etl``) does not parse: exactly two numeric fields must follow the prefix
    (or its family).
    """
    family = ""
    if transactional_id.startswith(prefix + ":"):
        family, sep, rest = transactional_id[len(prefix) + 1:].partition("-")
        if not sep or not _FAMILY.match(family):
            return None
    elif transactional_id.startswith(prefix + "-"):
        rest = transactional_id[len(prefix) + 1:]
    else:
        return None
    fields = rest.split("-")
    if len(fields) != 2 or not all(part.isdigit() for part in fields):
        return None
    return TransactionalId(prefix, family, int(fields[0]), int(fields[1]))


def lower_attempts(prefix: str, partition: int, attempt: int, family: str = "") -> list[str]:
    """Ids of the attempts of ``partition`` (in ``family``) that came before ``attempt``."""
    return [build(prefix, partition, a, family) for a in range(int(attempt))]


def pattern(prefix: str, families: str = "") -> str:
    """A regular expression matching the ids of ``prefix`` in the families ``families``
    selects (:func:`~kafka_eos_ds.twophase.identity.matches`): the ListTransactions filter."""
    heads = []
    for one in alternatives(families):
        if one.endswith("*"):
            heads.append(":" + re.escape(one[:-1]) + "[0-9a-f]*")
        else:
            heads.append(":" + re.escape(one) if one else "")
    head = heads[0] if len(heads) == 1 else "(" + "|".join(heads) + ")"
    return "^" + re.escape(prefix) + head + r"-[0-9]+-[0-9]+$"


def any_family(prefix: str) -> str:
    """A regular expression matching every id of ``prefix``, in any family."""
    return "^" + re.escape(prefix) + r"(:[a-z][0-9a-f]*)?-[0-9]+-[0-9]+$"


def in_families(prefix: str, transactional_id: str, families: str) -> bool:
    """Whether ``transactional_id`` is one of ``prefix``'s ids in the selected families."""
    parsed = parse(prefix, transactional_id)
    return parsed is not None and matches(families, parsed.family)


def decision_writer(prefix: str, writer: str = "") -> str:
    """The transactional id of a writer's commit-log producer: ``{prefix}.decisions`` for a
    stream's own sink, ``{prefix}:{writer}.decisions`` for the others.

    One per writer, so a new driver's producer fences a stalled one of the same writer
    and no other. It never parses as a task's id nor matches :func:`pattern` (a '.'
    follows the prefix or family, not '-')."""
    return f"{prefix}:{writer}.decisions" if writer else f"{prefix}.decisions"
