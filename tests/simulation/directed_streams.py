"""Directed schedules of a streaming query into the Kafka sink: zombie drivers, the
commit log shared with another sink, a lost checkpoint, an expired transactional id (the
table of all directed schedules: :mod:`.directed`)."""

from __future__ import annotations

import json
import random
from typing import Callable

from kafka_eos_ds.kafka_sink import transactional_ids
from tests.simulation.adapters import Producer
from tests.simulation.faults import CRASH, FAIL, SLOW, STALL, Fault
from tests.simulation.invariants import Oracle
from tests.simulation.scenario import Scenario, check_stream
from tests.simulation.sinks import KafkaSink
from tests.simulation.spark_jobs import BatchJob
from tests.simulation.spark_shapes import StreamQuery
from tests.simulation.world import World


def query(w: World, oracle: Oracle, sink: object, counts: list, per_trigger: int, **kw: object) -> StreamQuery:
    sink.setup(w, oracle)  # type: ignore[attr-defined]
    return StreamQuery(w, oracle, "q", sink, counts, per_trigger, **kw)


def resume_when(w: World, name: str, ready: Callable[[], bool]) -> None:
    """Resume the paused actor ``name`` (a zombie) at the first step where ``ready()``."""
    def watch() -> None:
        zombie = next((a for a in w.sched.actors if a.name == name), None)
        if zombie is not None and zombie.state == "paused" and ready():
            w.sched.log(f"{name} comes back")
            w.sched.resume(zombie)

    w.checks.append(watch)


def shared_prefix(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The stream dies after committing the first transaction of its decided batch 0 (crash
    point 3); a df.write with the same transactionalIdPrefix runs to completion; the
    stream restarts."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-first-commit", 1, CRASH)]
    sink = KafkaSink(out_partitions=1)
    q = query(w, oracle, sink, [2, 2], 2)
    q.delays = (0.5,)  # back well within the transaction timeout: a restart finishes the batch
    job = BatchJob(w, oracle, "job0", sink, [(0, 0), (1, 0)], 1, "job0")

    def main() -> None:
        q.supervise(runs=1)
        job.supervise()
        q.supervise()

    return Scenario(main, lambda: check_stream(w, oracle, q, [job]), outcome=lambda: q.outcome)


def stale_commit_log_read(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """A second sink on the same commit-log topic starts a decision write right after the
    query's decision of batch 0 is durable, and its driver dies before committing it: the
    write stays open (for its 60 s timeout), and every later record of the log is beyond
    the last stable offset, hidden from read_committed readers."""
    w.plan.script = []
    sink = KafkaSink(out_partitions=1)
    w.cluster.create_topic(sink.commit_log, 1)
    q = query(w, oracle, sink, [3, 3], 1)

    def decided(batch: int) -> bool:
        log = w.cluster.log(sink.commit_log, 0)
        return any(r.key == f"{sink.prefix}|q:{q.query_id}".encode() and json.loads(r.value)["batchId"] == batch
                   for r in log.read_committed())

    def other() -> None:
        w.sched.wait_until(lambda: decided(0))
        producer = Producer("other.decisions", 60_000, "the other sink's decision writer (an older version's)")
        producer.init()
        producer.produce(sink.commit_log, 0, b"other|q:o", json.dumps({"queryId": "o", "batchId": 0, "state": "done",
                                                                        "transactions": []}).encode())
        w.sched.log("the other sink's driver dies with its decision write open")

    def main() -> None:
        w.sched.spawn("other.w0", other, "other")
        q.supervise()

    return Scenario(main, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def zombie_driver_carry(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: the first driver stalls inside its commit of batch 0, after it saw
    the first transaction Ongoing and before AddOffsetsToTxn, and is replaced; it comes back
    after the query has finished and sends AddOffsetsToTxn + TxnOffsetCommit + EndTxn under
    that transaction's producer id and epoch, which are still current."""
    # Attempt 0 of batch 0's task dies, so its first participant is attempt 1's id, which
    # no later batch re-initialises: the epoch it ran under stays current.
    w.plan.script = [Fault("q.r0.b0.s0.p0.a0", "task:row", 1, CRASH),
                     Fault("q.r0", "kafka:AddOffsetsToTxn", 1, STALL, 1_000_000)]
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    q = query(w, oracle, sink, [2, 2], 1)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def zombie_driver_recovery(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The first driver stalls in batch 1's recovery, after reading the latest decision
    (batch 0 done) and before listing and fencing the sink's open transactions; it is
    replaced, and comes back the moment the new driver's decision of batch 1 is durable."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-reading-decision", 2, STALL, 1_000_000)]
    q = query(w, oracle, KafkaSink(out_partitions=1), [2, 2], 1)
    resume_when(w, "q.r0", lambda: any(d.batch_id == 1 and d.state.value == "decided" for d in oracle.decisions))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def zombie_driver_sweep(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The first driver stalls after committing every transaction of batch 0, before its
    post-commit sweep; it is replaced; it comes back the moment the new driver's decision
    of batch 1 is durable, and sweeps (fences) the sink's open transactions: batch 1's."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-all-commits", 1, STALL, 1_000_000)]
    q = query(w, oracle, KafkaSink(out_partitions=1), [2, 2], 1)
    q.delays = (0.5,)
    resume_when(w, "q.r0", lambda: any(d.batch_id == 1 and d.state.value == "decided" for d in oracle.decisions))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def zombie_recovery_carry(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: batch 0's driver dies right after its decision (its task's attempt
    0 died, so the batch's participant is attempt 1's id, which no later batch re-opens);
    the next driver's recovery stalls while re-attaching the batch's progress, after it saw
    the transaction Ongoing and before AddOffsetsToTxn, and is replaced; the third driver
    finishes batch 0 and the query. The stalled driver comes back and sends AddOffsetsToTxn,
    TxnOffsetCommit and EndTxn under the transaction's producer id and epoch, still current."""
    w.plan.script = [Fault("q.r0.b0.s0.p0.a0", "task:row", 1, CRASH),
                     Fault("q.r0", "fault:driver-after-decision", 1, CRASH),
                     Fault("q.r1", "kafka:AddOffsetsToTxn", 1, STALL, 1_000_000)]
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    q = query(w, oracle, sink, [2, 2], 1, tasks=1)
    q.delays = (0.5,)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def abandon_before_log(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: the driver dies after deciding batch 1, before committing any of
    it; the checkpoint is lost; the new query (starting at the group's offsets, batch 0's
    end) abandons the batch (none of it committed: the group holds the offsets before it)
    and dies between its two steps, recording 'abandoned' and fencing the batch's
    transaction; the next driver of the new query must go on."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-decision", 2, CRASH),
                     Fault("q2.r0", "kafka:InitProducerId", 2, CRASH)]  # 1: its decision writer, 2: the fence
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    first = query(w, oracle, sink, [2], 1)  # one input partition: one task, one participant
    first.delays = (0.5,)
    queries = [first]

    def main() -> None:
        first.supervise(runs=1)
        queries.append(first.without_checkpoint("q2"))
        queries[-1].delays = (0.5,)
        queries[-1].supervise()

    return Scenario(main, lambda: _after_lost_checkpoint(w, oracle, sink, queries), outcome=lambda: queries[-1].outcome)


def checkpoint_lost_idle(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: the only batch is decided and its first transaction (with the
    group's offsets) committed, then commit() raises; the checkpoint is lost; the new query
    starts at the group's offsets and finds no new input. Spark still runs its batch 0 (a
    fresh query has no offsets to compare with), whose recovery commits the decided batch's
    other transaction."""
    w.plan.script = [Fault("q.r0", "fault:commit-raise", 1, FAIL)]
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    first = query(w, oracle, sink, [1, 1], 1, tasks=2)
    queries = [first]

    def main() -> None:
        first.supervise(runs=1)
        queries.append(first.without_checkpoint("q2"))
        queries[-1].supervise()

    return Scenario(main, lambda: _after_lost_checkpoint(w, oracle, sink, queries), outcome=lambda: queries[-1].outcome)


def first_lost_rest_committed(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: batch 1 has two transactions; the second task opens its own 20 s
    after the first (a slow task), the driver decides at once (the first still has 40 s,
    more than the 30 the decision asks for here) and then pauses 52 s after its decision
    (a GC pause): the broker has aborted the first transaction (its 60 s timeout), not the
    second, and the group's offsets show the first never committed. The commit used to
    commit the second anyway, leaving the batch partly visible; the checkpoint is then
    lost, and the new query abandoned the batch (its first transaction did not commit) and
    re-read its input, writing the second's records again. The batch is now abandoned
    whole and the restarted query runs it again."""
    slow_task = "q.r0.b1.s0.p1.a0"
    w.plan.script = [Fault(slow_task, "task:row", 1, STALL, 1_000_000),
                     Fault("q.r0", "fault:driver-after-decision", 2, SLOW, 52_000)]
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    first = query(w, oracle, sink, [2, 2], 1, tasks=2)
    queries = [first]
    late: list = []

    def first_open() -> bool:
        # Task 0's id in the first run's family (a stream's ids carry its run).
        meta = next((m for tid, m in sorted(w.cluster.coordinator.txns.items())
                     if (t := transactional_ids.parse(sink.prefix, tid)) is not None
                     and t.family.startswith("s") and (t.partition, t.attempt) == (0, 0)), None)
        if meta is None or meta.state.value != "Ongoing":
            return False
        if not late:  # the slow task's 20 s, once the first transaction is open
            late.append(w.sched.clock.advance(20_000))
        return True

    resume_when(w, slow_task, first_open)

    def main() -> None:
        first.supervise(runs=2)
        queries.append(first.without_checkpoint("q2"))
        queries[-1].delays = (0.5,)
        queries[-1].supervise()

    return Scenario(main, lambda: _after_lost_checkpoint(w, oracle, sink, queries), outcome=lambda: queries[-1].outcome)


def _after_lost_checkpoint(w: World, oracle: Oracle, sink: KafkaSink, queries: list) -> None:
    """Every input once, from either query (the new one took over where the group's offsets say)."""
    last = queries[-1]
    everything = {f"q:{p}:{o}" for p, n in enumerate(last.counts) for o in range(n)}
    oracle.check_outputs(sink.visible(w, oracle), {"q": everything}, {"q": last.outcome == "finished"})
    oracle.check_decided()
    if last.outcome == "stuck":
        oracle.fail("stuck", f"the query failed on each of its restarts; last errors: {last.errors[-2:]}")


def expired_id_after_commit(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The driver dies after committing every transaction of batch 0, before recording it
    done (crash point 4), and stays down longer than the broker keeps idle transactional
    ids (transactional.id.expiration.ms, shortened to 5 minutes here)."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-all-commits", 1, CRASH)]
    w.cluster.expire_ids_after(300_000, 30_000)
    q = query(w, oracle, KafkaSink(out_partitions=1), [1], 1)
    q.delays = (400.0,)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def reached(w: World, name: str, label: str) -> bool:
    """Whether actor ``name`` has reached a step labelled ``label``."""
    actor = next((a for a in w.sched.actors if a.name == name), None)
    return actor is not None and actor.labels.get(label, 0) > 0


def zombie_step_before_commit(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """A zombie driver's whole recovery between a newer run's planner and its commit. The
    first driver stalls at batch 1's planner, before its recovery, and is replaced. The new
    run's planner recovers and its task pre-commits batch 1 (and is slow to report it: its
    driver's commit has not begun). The zombie comes back now: its recovery fences the
    decision writer, reads batch 0 done, observes the task's open transaction, claims the
    writer and stalls before aborting. The new run's commit fences the writer (the claim is
    already committed), sees the transaction open, decides it; its driver pauses (a GC) and
    the zombie aborts the decided transaction. The commit now refuses the batch undecided
    instead: the claim came after its planner read the commit log's position."""
    return zombie_step_scenario(w, oracle, "q.r1.b1.s0.p0.a0", "spark:plan")


def zombie_step_scenario(w: World, oracle: Oracle, task: str, zombie_stall: str, **shape: int) -> Scenario:
    """A zombie's whole step between a newer run's planner and its commit: run 0 stalls at
    its second ``zombie_stall`` step and comes back once ``task`` (the new run's) has
    pre-committed, down to its claim; the task reports once the zombie has claimed; the new
    run's driver pauses after its decision. ``shape``: more of :func:`query`'s arguments."""
    w.plan.script = [Fault("q.r0", zombie_stall, 2, STALL, 1_000_000),
                     Fault(task, "fault:task-after-precommit", 1, STALL, 1_000_000),
                     Fault("q.r0", "fault:driver-after-claim", 1, STALL, 1_000_000),
                     Fault("q.r1", "fault:driver-after-decision", 1, STALL, 40)]
    q = query(w, oracle, KafkaSink(out_partitions=1), [2], 1, tasks=1, **shape)
    q.delays = (0.5,)
    resume_when(w, "q.r0", lambda: reached(w, task, "fault:task-after-precommit")
                and not reached(w, "q.r0", "fault:driver-after-claim"))
    resume_when(w, task, lambda: reached(w, "q.r0", "fault:driver-after-claim"))
    # Only once the new run's own decision is durable (never, once that commit refuses the
    # batch): a zombie that came back later would start tasks of its own on the batch's
    # ids, another window (a zombie task re-initialising an id a decision names).
    resume_when(w, "q.r0", lambda: reached(w, "q.r1", "fault:driver-after-decision"))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)
