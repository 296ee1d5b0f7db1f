"""Which write a task belongs to: one explicit value, the same on the tasks and the driver.

Spark calls a sink in four shapes, and each gets its own kind of identity:

===========  ===========================================  =========================================
kind         when                                         identity (``app``, ``version``)
===========  ===========================================  =========================================
STREAM       ``writeStream.format(...)``                  the query id, the micro-batch id, plus
                                                          the stream's run id (tasks only)
FOREACH      ``df.write`` inside a classic ``foreachBatch``  the stream's query id, its micro-batch id,
                                                          plus the stream's run id and the write's
                                                          ordinal within the micro-batch
APP          ``df.write`` with ``txnAppId``/``txnVersion``  the two options (Delta Lake's names)
JOB          any other ``df.write``                        a fresh id per job, version 0
===========  ===========================================  =========================================

The tasks tell STREAM and FOREACH from Spark's local properties (``sql.streaming.queryId``,
``streaming.sql.batchId``, and the run id in the job description / job group); the driver
takes the identity from the tasks' commit messages, never from its own defaults, so a
write inside ``foreachBatch`` is committed under the micro-batch it belongs to. Explicit
options win over the local properties (Spark Connect's ``foreachBatch`` runs its writes
without the stream's properties: the options are the way to make them idempotent).

Each write also names a *family*: the token its participants' ids carry, so that writers
sharing one sink (a ``transactionalIdPrefix``, a directory) never touch each other's
work. STREAM uses one family per run of the query (``s{token(run)}``), so that the tasks
of a stalled driver of an earlier run (a zombie) can never re-open, and so abort, the ids a
newer run decided; its planner, which does not know the run, recovers them all (the
legacy empty family of earlier versions included: ``|s*``). The others never reuse a
family across jobs or runs where the planner cannot recover it first (FOREACH: per stream
run; JOB: per job), and APP reuses one family per app id (its planner knows the app id
and recovers it before the tasks).
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Callable

from kafka_eos_ds.errors import ConfigError


class Kind(str, enum.Enum):
    STREAM = "q"
    FOREACH = "f"
    APP = "a"
    JOB = "j"


def token(text: str, length: int = 8) -> str:
    """A short, stable, name-safe digest (hex) of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


@dataclass(frozen=True)
class WriteId:
    """One write: a micro-batch of a stream, a write inside ``foreachBatch``, an app's
    version, or a batch job.

    ``run`` (FOREACH and STREAM): the stream's run id, which tells a re-run of a
    micro-batch after a restart from the writes of the run that first ran it (a STREAM
    write's tasks know it; its planner does not, and builds the identity without it). ``job``: the batch
    writer's own id (JOB and APP), which makes a JOB's family unique.
    """

    kind: Kind
    app: str
    version: int
    run: str | None = None
    job: str | None = None

    @property
    def key(self) -> str:
        """The writer's name in the sink's decision log: one latest decision per key."""
        return f"{self.kind.value}:{self.app}"

    @property
    def family(self) -> str:
        """The token the write's participant ids carry (a stream's own sink: one per run,
        '' when the run is unknown, as in versions before the run was part of the ids)."""
        if self.kind is Kind.STREAM:
            return f"s{token(self.run)}" if self.run else ""
        if self.kind is Kind.FOREACH:
            return f"f{token(self.app)}{token(self.run or '')}"
        if self.kind is Kind.APP:
            return f"a{token(self.app)}"
        return f"j{token(self.job or self.app)}"

    @property
    def families(self) -> str:
        """Which participant families this writer recovers (:func:`matches`): its own,
        and for a stream or a write inside foreachBatch those of every run of its stream
        (a stream's: the legacy empty family too)."""
        if self.kind is Kind.STREAM:
            return STREAM_FAMILIES
        if self.kind is Kind.FOREACH:
            return f"f{token(self.app)}*"
        return self.family

    @property
    def writer(self) -> str:
        """The writer's family without the run: what its decision writer is named after
        (every run of a stream fences the stale decision writes of the runs before; a
        stream's own sink: '', its decision writer is ``{prefix}.decisions``)."""
        if self.kind is Kind.STREAM:
            return ""
        return self.family[:9] if self.kind is Kind.FOREACH else self.family

    @property
    def recovers_before_tasks(self) -> bool:
        """Whether the planner (which knows this identity before the tasks run) recovers
        the writer: STREAM and APP reuse their participant ids, so what an earlier run
        decided must be finished before a task re-opens one of them."""
        return self.kind in (Kind.STREAM, Kind.APP)


# Every family a stream's own sink has used: the legacy empty one and one per run.
STREAM_FAMILIES = "|s*"


def alternatives(families: str) -> list[str]:
    """The alternatives of a families selector: ``|``-separated, each an exact family (''
    included) or a prefix ending in ``*``."""
    return families.split("|")


def matches(families: str, family: str) -> bool:
    """Whether participant family ``family`` is selected by ``families`` (alternatives
    separated by ``|``, each an exact family or a prefix ending in ``*``)."""
    return any(family.startswith(one[:-1]) if one.endswith("*") else family == one
               for one in alternatives(families))


@dataclass(frozen=True)
class WriteSpec:
    """What the writer knows before its tasks run (pickled to them).

    ``streaming``: a stream writer (else ``df.write``); ``job``: the batch writer's own
    id; ``app``/``version``: the options ``txnAppId``/``txnVersion``.
    """

    streaming: bool
    job: str | None = None
    app: str | None = None
    version: int | None = None

    @classmethod
    def for_batch(cls, options: "Callable[[str], str | None]", job: str) -> "WriteSpec":
        """The spec of a ``df.write`` from its options (``options(name)`` -> value or None)."""
        app = (options("txnAppId") or "").strip() or None
        raw = (options("txnVersion") or "").strip() or None
        if (app is None) != (raw is None):
            raise ConfigError("Options 'txnAppId' and 'txnVersion' go together: set both (e.g. in foreachBatch, "
                              ".option('txnAppId', 'orders-etl').option('txnVersion', batch_id)) or neither.")
        version = None
        if raw is not None:
            if not re.fullmatch(r"\d{1,18}", raw):
                raise ConfigError(f"Option 'txnVersion' must be a whole number >= 0 (e.g. the foreachBatch "
                                  f"batch id), got {raw!r}.")
            version = int(raw)
        return cls(False, job, app, version)

    def planned(self) -> WriteId | None:
        """The identity when the planner can know it (APP), else None."""
        if self.app is not None and self.version is not None:
            return WriteId(Kind.APP, self.app, self.version, job=self.job)
        return None


_RUN = re.compile(r"runId = ([0-9a-f-]{36})")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def identify(spec: WriteSpec, local_property: Callable[[str], str | None]) -> WriteId:
    """The identity of the running task's write, from the spec and Spark's local properties."""
    planned = spec.planned()
    if planned is not None:
        return planned
    query = local_property("sql.streaming.queryId") or None
    batch = local_property("streaming.sql.batchId")
    if spec.streaming:
        if query is None or batch in (None, ""):
            raise ConfigError("A streaming write without Spark's streaming properties (sql.streaming.queryId, "
                              "streaming.sql.batchId): this Spark runs the sink in a way kafka_eos does not "
                              "support.")
        return WriteId(Kind.STREAM, query, int(str(batch)), run=_stream_run(local_property, required=False))
    if query is not None and batch not in (None, ""):
        return WriteId(Kind.FOREACH, query, int(str(batch)), run=_stream_run(local_property), job=spec.job)
    return WriteId(Kind.JOB, spec.job or "", 0, job=spec.job)


def _stream_run(local_property: Callable[[str], str | None], required: bool = True) -> str | None:
    """The stream's run id, which Spark puts in the job description and the job group of
    every job it runs for the stream (foreachBatch's jobs included)."""
    found = _RUN.search(local_property("spark.job.description") or "")
    if found:
        return found.group(1)
    group = (local_property("spark.jobGroup.id") or "").strip()
    if _UUID.match(group):
        return group
    if not required:
        # A stream's own sink without its run (a Spark that sets neither property): the
        # legacy empty family, which recovery still covers; only the fence of a stalled
        # earlier run's tasks (docs/dev/decisions.md, "A stream's participant ids carry
        # its run") is lost, not the ids' safety within a run.
        return None
    raise ConfigError("A df.write inside foreachBatch cannot tell the stream's run (the job description and job "
                      "group were replaced): set .option('txnAppId', <a name for this write>) and "
                      ".option('txnVersion', batch_id) so that a re-run of the micro-batch writes nothing new.")
