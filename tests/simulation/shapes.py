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
* ``foreach-batch``: two df.write per micro-batch inside ``foreachBatch``.

:data:`KNOWN_DEFECTS` lists, per shape, the rules today's code is known to break.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

from tests.simulation.invariants import Oracle
from tests.simulation.model.coordinator import SHORT_MAX
from tests.simulation.sinks import FileSink, KafkaSink, other_sink
from tests.simulation.spark_shapes import BatchJob, StreamQuery
from tests.simulation.world import World

# What today's code is known to break, per shape: the gate tolerates exactly these rules
# (anything else fails it); directed.py reproduces each cause on purpose. Drop a rule here
# when its defect is fixed.
_STREAM = {"progress", "left-open", "decided-fenced", "false-lost"}
_WHY_STREAM = ("zombie drivers: a late AddOffsetsToTxn under a still-current epoch (directed zombie-driver-carry), "
               "recovery or abort sweeps acting on a stale read of the log (zombie-driver-recovery); zombie tasks "
               "of a resubmitted stage re-initialising a decided id; the post-commit sweep skipping an id of the "
               "batch just committed that a zombie re-opened")
KNOWN_DEFECTS = {
    "stream": (_STREAM, _WHY_STREAM),
    "stream-long-outages": (_STREAM, _WHY_STREAM + "; an expired or re-used id read as lost (directed "
                                                   "expired-id-after-commit)"),
    "stream-file": ({"unexpected-error", "commit-without-decision", "duplicate", "order"},
                    "a zombie driver of the file sink: raw FileNotFoundError; a stale decision.json written over "
                    "a newer one, after which a re-run decides a done batch again (directed file-zombie-rename, "
                    "file-zombie-decision)"),
    "stream-shared-log": (_STREAM | {"duplicate", "order", "decided-not-visible"},
                          "another sink's open decision write hides newer decisions (directed "
                          "stale-commit-log-read); " + _WHY_STREAM),
    "stream-and-batch": (_STREAM | {"duplicate", "order", "lost-forever", "partial", "decided-not-visible"},
                         "a df.write on the stream's prefix erases its done mark, re-uses its ids (directed "
                         "shared-prefix-done-mark, concurrent-batch-jobs); " + _WHY_STREAM),
    "checkpoint-lost": (_STREAM | {"lost", "decided-not-visible"},
                        "after a lost checkpoint: the abandon path fences before it records (directed "
                        "abandon-before-log); a decided batch is finished only by the new query's first batch "
                        "(checkpoint-lost-idle); " + _WHY_STREAM),
    "batch": ({"lost-forever", "partial", "decided-fenced"},
              "a df.write decided, committed part of its batch and failed or died: the part stays visible, and "
              "the rest is lost if its transactions time out before the next writer of the prefix, which then "
              "fails, as every later one does; a resubmitted stage's tasks re-use attempt 0's ids"),
    "batch-concurrent": ({"false-lost", "lost-forever", "partial", "decided-fenced"},
                         "concurrent df.write jobs on one prefix share transactional ids (directed "
                         "concurrent-batch-jobs)"),
    "foreach-batch": (_STREAM | {"lost"},
                      "a df.write inside foreachBatch commits under the stream's first batch id: every later "
                      "write is a silent no-op and its rows are lost (directed foreach-batch-writes)"),
}


def run_cleanup(w: World, oracle: Oracle, sink: Any) -> str:
    """After every fault: an empty df.write on the prefix, re-run up to three times (a user
    re-running a failed job); its recovery finishes what a failed writer decided."""
    w.plan.budget = len(w.plan.injected)
    outcome = ""
    for attempt in range(3):
        job = BatchJob(w, oracle, f"cleanup{attempt}", sink, [], 1, "cleanup")
        job.supervise()
        outcome = job.outcome
        if outcome == "ok":
            break
    return outcome


def cleanup_check(oracle: Oracle, outcome: str) -> None:
    """The clean-up must succeed. Failing with a TransactionLostError (about an earlier
    writer's decided batch: it writes nothing itself) shows that every later writer of the
    prefix fails the same way."""
    if outcome == "ok":
        return
    rule = "lost-forever" if "TransactionLostError" in outcome else "stuck"
    oracle.fail(rule, f"a df.write on the prefix after the faults failed three times: {outcome}")


@dataclass
class Scenario:
    main: Callable[[], None]
    finals: Callable[[], None]
    on_rename: Callable[[str, str], None] = lambda src, dst: None
    outcome: Callable[[], str] = lambda: ""


def _epochs(w: World, rng: random.Random) -> None:
    """One schedule in four exhausts producer epochs quickly (Kafka: 32766), so producer ids rotate."""
    w.cluster.coordinator.epoch_limit = rng.choice([SHORT_MAX, SHORT_MAX, SHORT_MAX, 7])


def _stream(w: World, oracle: Oracle, rng: random.Random, *, file: bool = False, shared_log: bool = False,
            jobs: int = 0, foreach: int = 0, long_outages: bool = False) -> Scenario:
    sink: Any = FileSink(w.root / "out") if file else KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    _epochs(w, rng)
    counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 3))]
    progress = not file and not foreach and rng.random() < 0.4
    if progress:
        sink.extra["sourceGroupId"] = "source-group"
    q = StreamQuery(w, oracle, "q", sink, counts, rng.randint(1, 3), foreach_writes=foreach)
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


def check_stream(w: World, oracle: Oracle, q: StreamQuery, jobs: list[BatchJob] = ()) -> None:
    """The after-schedule checks of a query (and of batch jobs writing to its sink)."""
    visible = q.sink.visible(w, oracle)
    expected = {label: {v for v in q.expected() if v.startswith(label + ":")} for label in q.labels()}
    complete = {label: q.outcome == "finished" for label in q.labels()}
    for job in jobs:
        expected[job.label] = job.values()
        complete[job.label] = job.outcome == "ok"
    oracle.check_outputs(visible, expected, complete)
    shown = {v for values in visible.values() for v in values}
    for job in jobs:
        if "TransactionLostError" not in job.outcome:  # a loud partial outcome
            oracle.check_atomic(job.label, job.values(), shown)
    if q.sink.kind == "kafka":
        oracle.check_decided()
    if q.outcome == "stuck":
        oracle.fail("stuck", f"the query failed on each of its restarts; last errors: {q.errors[-2:]}")
    group = q.sink.extra.get("sourceGroupId") if q.sink.kind == "kafka" else None
    if group and q.outcome == "finished":
        held = w.cluster.groups.offsets(group)
        want = {("in", p): n for p, n in enumerate(q.counts)}
        if held != want:
            oracle.fail("progress", f"the source group holds {held}, the query consumed {want}")


def _batch(w: World, oracle: Oracle, rng: random.Random, concurrent: bool = False) -> Scenario:
    sink = KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    _epochs(w, rng)
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
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {j.label: j.values() for j in jobs}, {j.label: j.outcome == "ok" for j in jobs})
        shown = {v for values in visible.values() for v in values}
        for job in jobs:
            if "TransactionLostError" not in job.outcome:  # a loud partial outcome
                oracle.check_atomic(job.label, job.values(), shown)
        oracle.check_decided()
        cleanup_check(oracle, cleanup[0])

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs))


def _checkpoint_lost(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: after a failed or crashed run the checkpoint is lost; a new query
    (new id, new checkpoint) starts from the group's committed offsets
    (startingOffsets=group, earliest where the group has none)."""
    sink = KafkaSink(out_partitions=rng.randint(1, 2), extra={"sourceGroupId": "source-group"})
    sink.setup(w, oracle)
    _epochs(w, rng)
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
        oracle.check_outputs(visible, {"q": everything}, {"q": last.outcome == "finished"})
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
    "foreach-batch": lambda w, o, r: _stream(w, o, r, foreach=2),
}
