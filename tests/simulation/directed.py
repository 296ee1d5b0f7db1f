"""Directed schedules: the interleavings that broke the protocol, each set up on purpose.

Each builds a scenario whose faults are scripted (by actor, step label and occurrence,
so they land in the same place whatever the seed), leaving only the interleaving of the
other actors to the seed. ``test_simulation.py`` runs each over several seeds; they are
the regression tests of the defects listed in :data:`DIRECTED` (what breaks today).
"""

from __future__ import annotations

import json
import random
from typing import Callable

from tests.simulation.adapters import Producer
from tests.simulation.faults import CRASH, FAIL, STALL, Fault
from tests.simulation.invariants import Oracle
from tests.simulation.shapes import Scenario, check_stream, cleanup_check, run_cleanup
from tests.simulation.sinks import FileSink, KafkaSink
from tests.simulation.spark_shapes import BatchJob, StreamQuery
from tests.simulation.world import World


def _query(w: World, oracle: Oracle, sink: object, counts: list, per_trigger: int, **kw: object) -> StreamQuery:
    sink.setup(w, oracle)  # type: ignore[attr-defined]
    return StreamQuery(w, oracle, "q", sink, counts, per_trigger, **kw)


def foreach_batch(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """No fault at all: two df.write per micro-batch inside foreachBatch, three micro-batches."""
    w.plan.script = []
    q = _query(w, oracle, KafkaSink(out_partitions=1), [3, 3], 1, foreach_writes=2)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def shared_prefix(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The stream dies after committing the first transaction of its decided batch 0 (crash
    point 3); a df.write with the same transactionalIdPrefix runs to completion; the
    stream restarts."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-first-commit", 1, CRASH)]
    sink = KafkaSink(out_partitions=1)
    q = _query(w, oracle, sink, [2, 2], 2)
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
    q = _query(w, oracle, sink, [3, 3], 1)

    def decided(batch: int) -> bool:
        log = w.cluster.log(sink.commit_log, 0)
        return any(r.key == sink.prefix and json.loads(r.value)["batchId"] == batch
                   for r in log.read_committed())

    def other() -> None:
        w.sched.wait_until(lambda: decided(0))
        producer = Producer("other.decisions", 60_000, "the other sink's decision writer")
        producer.init()
        producer.produce(sink.commit_log, 0, "other", json.dumps({"queryId": "o", "batchId": 0, "state": "done",
                                                                  "transactions": []}))
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
    q = _query(w, oracle, sink, [2, 2], 1)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def concurrent_batch_jobs(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """Two df.write jobs on one transactionalIdPrefix: job0 stalls right after its decision
    is durable; job1 starts then, and its tasks use the same transactional ids."""
    w.plan.script = [Fault("job0", "fault:driver-after-decision", 1, STALL, 1_000_000)]
    sink = KafkaSink(out_partitions=1)
    sink.setup(w, oracle)
    jobs = [BatchJob(w, oracle, f"job{i}", sink, [(0, 0), (0, 1)], 1, f"job{i}") for i in range(2)]
    cleanup = [""]

    def second() -> None:
        w.sched.wait_until(lambda: bool(oracle.decisions))
        jobs[1].supervise()

    def main() -> None:
        users = [w.sched.spawn("job0.user", jobs[0].supervise, "user"), w.sched.spawn("job1.user", second, "user")]
        w.sched.wait_until(lambda: all(u.done for u in users))
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {j.label: j.values() for j in jobs}, {j.label: j.outcome == "ok" for j in jobs})
        oracle.check_decided()
        cleanup_check(oracle, cleanup[0])

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs) + f",cleanup {cleanup[0]}")


def file_zombie_rename(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the driver stalls just before renaming batch 0's pending file to its final
    name and is replaced; the new driver's recovery renames it; the old one comes back."""
    w.plan.script = [Fault("q.r0", "fs:rename", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = _query(w, oracle, sink, [2], 1)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def file_zombie_decision(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the driver stalls just before writing batch 0's decision and is replaced;
    it comes back while the new driver commits batch 1, and writes its stale decision of
    batch 0 over batch 1's (decision.json has no fencing of a stale writer)."""
    w.plan.script = [Fault("q.r0", "fs:replace", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = _query(w, oracle, sink, [3, 3], 1)

    def deciding(batch: int) -> bool:
        try:
            d = json.loads((sink.path / "_kafka_eos" / "decision.json").read_text())
        except (OSError, ValueError):
            return False
        return d["batchId"] == batch and d["state"] == "decided"

    def watch() -> None:  # runs at every step: the zombie comes back the moment batch 1 is decided
        zombie = next((a for a in w.sched.actors if a.name == "q.r0"), None)
        if zombie is not None and zombie.state == "paused" and deciding(1):
            w.sched.log("q.r0 comes back")
            w.sched.resume(zombie)

    w.checks.append(watch)

    def main() -> None:
        q.supervise()

    return Scenario(main, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def zombie_driver_recovery(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The first driver stalls in batch 1's recovery, after reading the latest decision
    (batch 0 done) and before listing and fencing the sink's open transactions; it is
    replaced, and comes back the moment the new driver's decision of batch 1 is durable."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-reading-decision", 2, STALL, 1_000_000)]
    q = _query(w, oracle, KafkaSink(out_partitions=1), [2, 2], 1)

    def watch() -> None:
        zombie = next((a for a in w.sched.actors if a.name == "q.r0"), None)
        if zombie is not None and zombie.state == "paused" and any(
                d.batch_id == 1 and d.state.value == "decided" for d in oracle.decisions):
            w.sched.log("q.r0 comes back")
            w.sched.resume(zombie)

    w.checks.append(watch)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def abandon_before_log(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: the driver dies after deciding batch 0, before committing any of
    it; the checkpoint is lost; the new query's recovery abandons the batch (nothing of it
    started) and dies between fencing its transaction and recording 'abandoned'."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-decision", 1, CRASH),
                     Fault("q2.r0", "kafka:InitProducerId", 3, CRASH)]  # 1: decision writer, 2: the fence
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    first = _query(w, oracle, sink, [2], 1)  # one input partition: one task, one participant
    queries = [first]

    def main() -> None:
        first.supervise(runs=1)
        queries.append(first.without_checkpoint("q2"))
        queries[-1].supervise()

    return Scenario(main, lambda: check_stream(w, oracle, queries[-1]), outcome=lambda: queries[-1].outcome)


def checkpoint_lost_idle(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """With sourceGroupId: the only batch is decided and its first transaction (with the
    group's offsets) committed, then commit() raises; the checkpoint is lost; the new query
    starts at the group's offsets, finds no new input, and so never runs a batch, whose
    recovery would have committed the decided batch's other transaction."""
    w.plan.script = [Fault("q.r0", "fault:commit-raise", 1, FAIL)]
    sink = KafkaSink(out_partitions=1, extra={"sourceGroupId": "source-group"})
    first = _query(w, oracle, sink, [1, 1], 1, tasks=2)
    queries = [first]

    def main() -> None:
        first.supervise(runs=1)
        queries.append(first.without_checkpoint("q2"))
        queries[-1].supervise()

    def finals() -> None:
        everything = {f"q:{p}:0" for p in range(2)}
        oracle.check_outputs(sink.visible(w, oracle), {"q": everything}, {"q": queries[-1].outcome == "finished"})
        oracle.check_decided()

    return Scenario(main, finals, outcome=lambda: queries[-1].outcome)


def expired_id_after_commit(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """The driver dies after committing every transaction of batch 0, before recording it
    done (crash point 4), and stays down longer than the broker keeps idle transactional
    ids (transactional.id.expiration.ms, shortened to 5 minutes here)."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-all-commits", 1, CRASH)]
    w.cluster.expire_ids_after(300_000, 30_000)
    q = _query(w, oracle, KafkaSink(out_partitions=1), [1], 1)
    q.delays = (400.0,)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


# name -> (builder, the rules it breaks today, what the defect is)
DIRECTED: dict[str, tuple[Callable[[World, Oracle, random.Random], Scenario], set, str]] = {
    "foreach-batch-writes": (foreach_batch, {"lost"},
                             "df.write inside foreachBatch: every write after the stream's first commits nothing"),
    "shared-prefix-done-mark": (shared_prefix, {"duplicate"},
                                "a df.write's decision on the stream's prefix erases the stream's done mark; the "
                                "re-run of the decided batch writes it again"),
    "stale-commit-log-read": (stale_commit_log_read, {"false-lost"},
                              "another sink's open decision write hides newer decisions; a committed batch is "
                              "reported lost (TransactionLostError) and the query fails on every restart"),
    "zombie-driver-carry": (zombie_driver_carry, {"progress"},
                            "a late AddOffsetsToTxn opens a new transaction under a still-current epoch; the "
                            "group's offsets go back to an old batch's"),
    "zombie-driver-recovery": (zombie_driver_recovery, {"decided-fenced"},
                               "a driver that read the log, stalled and came back fences (recovery) the open "
                               "transactions of a batch a newer driver decided meanwhile: that batch is lost"),
    "abandon-before-log": (abandon_before_log, {"decided-fenced", "stuck"},
                           "abandoning a lost checkpoint's decided batch fences its transactions before recording "
                           "'abandoned'; a crash between leaves every restart failing with 'Cannot tell'"),
    "checkpoint-lost-idle": (checkpoint_lost_idle, {"lost", "decided-not-visible"},
                             "after a lost checkpoint, a decided batch whose first transaction committed is "
                             "finished only by the recovery of the new query's first batch: with no new input "
                             "within the transaction timeout, the rest is lost, silently"),
    "expired-id-after-commit": (expired_id_after_commit, {"false-lost"},
                                "a committed transaction whose id expired (or moved to a newer epoch) is "
                                "classified lost: a fully committed batch fails every restart"),
    "concurrent-batch-jobs": (concurrent_batch_jobs, {"false-lost"},
                              "a second df.write on the prefix finishes the first one's decision and re-uses its "
                              "transactional ids; the first one then reports its committed rows lost"),
    "file-zombie-decision": (file_zombie_decision, {"commit-without-decision", "unexpected-error"},
                             "a zombie driver overwrites decision.json with a stale decision; its post-commit "
                             "sweep deletes the live batch's pending files"),
    "file-zombie-rename": (file_zombie_rename, {"unexpected-error"},
                           "a zombie driver's commit rename fails with a raw FileNotFoundError"),
}
