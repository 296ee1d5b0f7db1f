"""The randomized shapes: what runs in a schedule, built from its seed, and what is
checked after it. Each draws its sizes (input partitions and records, records per
trigger, output partitions, task counts) and options from the seed.

* ``stream``: a streaming query into the Kafka sink (one schedule in three with
  ``sourceGroupId``, one in four with producer ids rotating early);
* ``stream-file``: the same into the file sink;
* ``stream-shared-log``: plus a second sink whose drivers die mid decision write on the
  shared commit-log topic;
* ``stream-long-outages``: restarts after minutes (past the transaction timeout and the
  shortened id expiry);
* ``stream-and-batch``: plus df.write jobs on the same ``transactionalIdPrefix``;
* ``checkpoint-lost``: with ``sourceGroupId``, the checkpoint is lost after a failed run
  and a new query starts from the group's offsets;
* ``batch`` / ``batch-concurrent``: df.write jobs, one after another or at once;
* ``foreach-batch``: one to three df.write per micro-batch inside a classic
  ``foreachBatch`` (the writes see the stream's query id, micro-batch id and run id);
  ``foreach-batch-file``: the same into the file sink; ``foreach-batch-connect``: Spark
  Connect's ``foreachBatch`` (no stream properties: each write names itself with
  ``txnAppId``/``txnVersion``);
* ``app-writes``, ``two-streams``: :mod:`.write_shapes`.

:data:`KNOWN_DEFECTS` lists, per shape, the rules today's code is known to break.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from tests.simulation.invariants import Oracle
from tests.simulation.scenario import Scenario, check_jobs, check_stream, cleanup_check, epochs, run_cleanup
from tests.simulation.sinks import FileSink, KafkaSink, other_sink
from tests.simulation.spark_jobs import BatchJob, loud_partial
from tests.simulation.spark_shapes import StreamQuery
from tests.simulation.world import World
from tests.simulation.write_shapes import WRITE_SHAPES

# What today's code is known to break, per shape: the gate tolerates exactly these rules
# (anything else fails it); directed.py reproduces each cause on purpose. Drop a rule here
# when its defect is fixed.
# (Zombie drivers fencing on a stale read, directed zombie-driver-recovery and -sweep, are
# fixed: fences claim the decision writer and abort exact transactions; so is a zombie
# driver's whole step between a newer run's planner and its commit, directed
# zombie-step-before-commit: the commit refuses a write whose writer was claimed since.
# "progress", a zombie's empty batch moving the source group back, is fixed too: a batch
# without output commits its offsets in its done record's transaction, which a fenced
# writer cannot commit; docs/dev/decisions.md, "A batch without output records `done`,
# its offsets in the same transaction".)
# A zombie driver's own tasks no longer can: a stream's ids carry its run (docs/dev/
# decisions.md, "A stream's participant ids carry its run"; FOUND's
# zombie-driver-tasks-reopen-a-newer-runs-id).
_ZOMBIES = ("a stale task of the same run or job opening a transaction on an id a decision names: an old stage "
            "attempt's task restarted at attempt 0 (stage-retry-same-id), or a write's stalled task, speculated "
            "away, whose InitProducerId comes after a later write of the same run re-used its id (foreach-batch "
            "seed 700176)")
_STREAM = {"decided-fenced", "false-lost"}
_WHY_STREAM = _ZOMBIES
# A limit of the design, not a defect (docs/dev/decisions.md, "The simulation's known
# lists: `progress` dropped; a dead df.write's decided rest is a limit"): nothing
# restarts a batch job, so no step of its own can finish it.
_JOBS = ("a df.write decided, committed part of its output and failed or died: the rest is lost (loudly, by the next "
         "writer of the prefix) if its transactions time out first")
KNOWN_DEFECTS = {
    "stream": (_STREAM, _WHY_STREAM),
    "stream-long-outages": (_STREAM, _WHY_STREAM),
    "stream-shared-log": (_STREAM, _WHY_STREAM),
    "stream-file": (set(), ""),
    "stream-and-batch": (_STREAM | {"partial", "decided-not-visible"}, _WHY_STREAM + "; " + _JOBS),
    "checkpoint-lost": (_STREAM, _WHY_STREAM),
    "batch": ({"partial", "decided-not-visible", "decided-fenced"}, _JOBS + "; " + _ZOMBIES),
    "batch-concurrent": ({"partial", "decided-not-visible", "decided-fenced"}, _JOBS + "; " + _ZOMBIES),
    "app-writes": ({"decided-fenced"}, _ZOMBIES),
    "foreach-batch": (_STREAM, _ZOMBIES),
    "foreach-batch-connect": ({"decided-fenced", "false-lost"}, _ZOMBIES),
    "foreach-batch-file": (set(), ""),
    "two-streams": ({"decided-fenced", "false-lost"},
                    "two streams share the stream's ids and decision writer: before one notices the other, each can "
                    "abort the other's decided batch (a TransactionLostError, not the conflict); " + _ZOMBIES),
}


def _stream(w: World, oracle: Oracle, rng: random.Random, *, file: bool = False, shared_log: bool = False,
            jobs: int = 0, foreach: int = 0, connect: bool = False, long_outages: bool = False) -> Scenario:
    sink: Any = FileSink(w.root / "out") if file else KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    epochs(w, rng)
    counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]
    progress = not file and not foreach and rng.random() < 0.4
    if progress:
        sink.extra["sourceGroupId"] = "source-group"
    q = StreamQuery(w, oracle, "q", sink, counts, rng.randint(1, 3), foreach_writes=foreach,
                    foreach="connect" if connect else "classic")
    if long_outages:
        # The query stays down for minutes (past the transaction timeout, 60 s) or longer
        # than the brokers keep an idle transactional id (shortened here to 5 minutes).
        q.delays = (0.5, 5.0, 90.0, 400.0)
        w.cluster.expire_ids_after(300_000, 30_000)
    batch_jobs = [BatchJob(w, oracle, f"job{i}", sink, [(p, o) for p in range(2) for o in range(rng.randint(1, 3))],
                           rng.randint(1, 2), f"job{i}") for i in range(jobs)]
    if shared_log:
        w.cluster.create_topic(sink.commit_log, 1)
    # With df.write jobs on the prefix: a last one, without faults, whose recovery finishes
    # what a failed job decided (nobody re-runs a failed df.write).
    cleanup = [""]

    def main() -> None:
        sched = w.sched
        users = []
        if shared_log:
            sched.spawn("other", lambda: other_sink(w, sink.commit_log, rng.randint(2, 5)), "other")
        for job in batch_jobs:
            start = rng.uniform(0, 20)

            def run(job: BatchJob = job, start: float = start) -> None:
                sched.sleep(start)
                job.supervise()

            users.append(sched.spawn(f"{job.name}.user", run, "user"))
        q.supervise()
        if jobs:
            sched.wait_until(lambda: all(u.done for u in users))
            cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        check_stream(w, oracle, q, batch_jobs)
        if jobs:
            cleanup_check(oracle, cleanup[0])

    def on_rename(src: str, dst: str) -> None:
        if file:
            oracle.file_final_rename(sink.path, src, dst)

    return Scenario(main, finals, on_rename, lambda: q.outcome)


def _batch(w: World, oracle: Oracle, rng: random.Random, concurrent: bool = False) -> Scenario:
    sink = KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    epochs(w, rng)
    jobs = [BatchJob(w, oracle, f"job{i}", sink, [(p, o) for p in range(rng.randint(1, 3))
                                                  for o in range(rng.randint(1, 3))], rng.randint(1, 3), f"job{i}")
            for i in range(rng.randint(2, 3))]
    cleanup = [""]

    def main() -> None:
        sched = w.sched
        users = []
        for job in jobs:
            if concurrent:
                users.append(sched.spawn(f"{job.name}.user", job.supervise, "user"))
            else:
                job.supervise()
        sched.wait_until(lambda: all(u.done for u in users))
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        visible = check_jobs(w, oracle, sink, jobs, cleanup[0])
        shown = {v for values in visible.values() for v in values}
        for job in jobs:
            if not loud_partial(job.outcome):
                oracle.check_atomic(job.label, job.values(), shown)

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs))


def _checkpoint_lost(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: after a failed or crashed run the checkpoint is lost; a new query
    (new id, new checkpoint) starts from the group's committed offsets
    (startingOffsets=group, earliest where the group has none)."""
    sink = KafkaSink(out_partitions=rng.randint(1, 2), extra={"sourceGroupId": "source-group"})
    sink.setup(w, oracle)
    epochs(w, rng)
    counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]
    per_trigger = rng.randint(1, 3)
    first = StreamQuery(w, oracle, "q", sink, counts, per_trigger)
    queries = [first]

    def main() -> None:
        first.supervise(runs=rng.randint(1, 3))
        if first.outcome == "running":
            second = first.without_checkpoint("q2")
            queries.append(second)
            second.supervise()

    def finals() -> None:
        last = queries[-1]
        visible = sink.visible(w, oracle)
        everything = {f"q:{p}:{o}" for p, n in enumerate(counts) for o in range(n)}
        # A batch a TransactionLostError announced lost stays lost: the new query starts
        # after it (its first transaction, which carried the group's offsets, committed).
        announced = any("TransactionLostError" in e for q in queries for e in q.errors)
        oracle.check_outputs(visible, {"q": everything}, {"q": last.outcome == "finished" and not announced})
        oracle.check_decided()
        if last.outcome == "stuck":
            oracle.fail("stuck", f"the query failed on each of its restarts; last errors: {last.errors[-2:]}")

    return Scenario(main, finals, outcome=lambda: "/".join(q.outcome for q in queries))


SHAPES: dict[str, Callable[[World, Oracle, random.Random], Scenario]] = {
    "stream": lambda w, o, r: _stream(w, o, r),
    "stream-file": lambda w, o, r: _stream(w, o, r, file=True),
    "stream-shared-log": lambda w, o, r: _stream(w, o, r, shared_log=True),
    "stream-long-outages": lambda w, o, r: _stream(w, o, r, long_outages=True),
    "checkpoint-lost": _checkpoint_lost,
    "stream-and-batch": lambda w, o, r: _stream(w, o, r, jobs=r.randint(1, 2)),
    "batch": _batch,
    "batch-concurrent": lambda w, o, r: _batch(w, o, r, concurrent=True),
    "foreach-batch": lambda w, o, r: _stream(w, o, r, foreach=r.randint(1, 3)),
    "foreach-batch-file": lambda w, o, r: _stream(w, o, r, file=True, foreach=r.randint(1, 3)),
    "foreach-batch-connect": lambda w, o, r: _stream(w, o, r, foreach=r.randint(1, 3), connect=True),
    **WRITE_SHAPES,
}
