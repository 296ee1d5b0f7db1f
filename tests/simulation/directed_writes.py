"""Directed schedules of batch writes and foreachBatch (Kafka sink and file sink), and of
the file sink's zombie drivers (the table of all directed schedules: :mod:`.directed`)."""

from __future__ import annotations

import random
from typing import Any

from kafka_eos_ds.table_sink.layout import writer_dir
from tests.simulation.directed_streams import query, resume_when, zombie_step_scenario
from tests.simulation.faults import CRASH, FAIL, SPARK, STALL, Fault
from tests.simulation.invariants import Oracle, newest_file_decision
from tests.simulation.scenario import Scenario, check_jobs, check_stream, run_cleanup
from tests.simulation.sinks import FileSink, KafkaSink
from tests.simulation.spark_jobs import BatchJob
from tests.simulation.world import World


def foreach_batch(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """No fault at all: two df.write per micro-batch inside foreachBatch, three micro-batches."""
    w.plan.script = []
    q = query(w, oracle, KafkaSink(out_partitions=1), [3, 3], 1, foreach_writes=2)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def foreach_zombie_ordinal(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """foreachBatch with two df.write into the Kafka sink: the first driver stalls at its
    commit of micro-batch 0's first write and is replaced; the new driver commits that
    write; the old one comes back, finds the write committed by another run and records
    that it skipped it (then dies); the new driver's second write reads that record."""
    w.plan.script = [Fault("q.r0", "spark:commit", 1, STALL, 1_000_000),
                     Fault("q.r0", "spark:plan", 2, CRASH)]
    q = query(w, oracle, KafkaSink(out_partitions=1), [2], 2, foreach_writes=2, tasks=1)
    q.delays = (0.5,)
    resume_when(w, "q.r0", lambda: any(d.state.value == "done" and d.participants and d.write == 0
                                        for d in oracle.decisions))
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q), outcome=lambda: q.outcome)


def foreach_zombie_step_before_commit(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """foreachBatch with one df.write into the Kafka sink: the first driver stalls before its
    commit of micro-batch 1's write and is replaced. The new run's write is planned and its
    task pre-commits (and is slow to report it). The zombie comes back now: its commit
    fences the earlier runs' open transactions (the new run's among them: another run),
    observes the new run's transaction, claims the write's decision writer and stalls
    before aborting. The new run's commit then decides its write; its driver pauses and the
    zombie aborts the decided transaction. The commit now refuses the write undecided: the
    claim came after the write's planner read the commit log's position."""
    return zombie_step_scenario(w, oracle, "q.r1.b1.w0.s0.p0.a0", "spark:commit", foreach_writes=1)


def foreach_file_zombie(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """foreachBatch with two df.write into the file sink: the first driver stalls after
    committing the first file of micro-batch 0's first write, and is replaced; the new
    driver runs both micro-batches to the end; the old one comes back, records its write
    done (over the newer decision: the file sink has no fencing of a stale writer) and runs
    the function's second write of micro-batch 0 again."""
    w.plan.script = [Fault("q.r0", "fault:driver-after-first-commit", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [2], 1, foreach_writes=2, tasks=1)
    q.delays = (0.5,)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def foreach_file_zombie_abort(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """foreachBatch with one df.write into the file sink (the gate's schedule
    foreach-batch-file seed 6, set up on purpose): the first driver stalls after committing
    micro-batch 0's files and is replaced; the new driver's task stages micro-batch 1's
    file and stalls; the old driver comes back, its post-commit sweep finds it fell behind,
    and Spark's abort of its write reads the log afresh, lists the new driver's staged
    file, claims, and stalls before deleting it; the new driver's commit runs then, and the
    old driver deletes once that commit is decided (the new driver waiting) or has ended."""
    task = "q.r1.b1.w0.s0.p0.a0"
    w.plan.script = [Fault("q.r0", "fault:driver-after-all-commits", 1, STALL, 1_000_000),
                     Fault(task, "fault:task-after-precommit", 1, STALL, 1_000_000),
                     # its first deletion: the move of micro-batch 0's file; then the claim's
                     # pruned decision record; then the staged file
                     Fault("q.r0", "fs:unlink", 3, STALL, 1_000_000),
                     # the new driver, once decided, waits for the old one to go on
                     Fault("q.r1", "fault:driver-after-decision", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [2, 2], 1, foreach_writes=1, tasks=1)
    q.delays = (0.5,)

    def actor(name: str):  # noqa: ANN202
        return next((a for a in w.sched.actors if a.name == name), None)

    def paused(name: str) -> bool:
        found = actor(name)
        return found is not None and found.state == "paused"

    def aborting() -> bool:  # the old driver stalls inside Spark's abort of its write
        return paused("q.r0") and actor("q.r0").labels.get("spark:abort", 0) > 0  # type: ignore[union-attr]

    def decided_or_ended() -> bool:
        d = newest_file_decision(sink.path / "_kafka_eos" / writer_dir(f"f:{q.query_id}"))
        live = actor("q.r1")
        return (d is not None and d.batch_id == 1 and d.state.value == "decided") or (live is not None and live.done)

    resume_when(w, "q.r0", lambda: (paused(task) and not aborting()) or (aborting() and decided_or_ended()))
    resume_when(w, task, aborting)
    resume_when(w, "q.r1", lambda: actor("q.r0").done)  # type: ignore[union-attr]
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


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
        check_jobs(w, oracle, sink, jobs, cleanup[0])

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs) + f",cleanup {cleanup[0]}")


def finish_jobs_forget(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """df.write job1 dies right after its decision; the next df.write on the prefix (job0)
    finishes it at its own commit, and fails after committing the first of job1's two
    transactions (a commit that times out); a last df.write runs after."""
    w.plan.script = [Fault("job1", "fault:driver-after-decision", 1, CRASH),
                     Fault("job0", "fault:commit-raise", 1, FAIL)]
    sink = KafkaSink(out_partitions=1)
    sink.setup(w, oracle)
    jobs = [BatchJob(w, oracle, "job1", sink, [(0, 0), (1, 0)], 2, "job1"),
            BatchJob(w, oracle, "job0", sink, [(0, 1)], 1, "job0")]
    cleanup = [""]

    def main() -> None:
        for job in jobs:
            job.supervise()
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        visible = check_jobs(w, oracle, sink, jobs, cleanup[0])
        oracle.check_atomic("job1", jobs[0].values(), {v for values in visible.values() for v in values})

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs) + f",cleanup {cleanup[0]}")


def stage_retry_same_id(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """A df.write of one task: its stage is resubmitted (a FetchFailed) while the task runs,
    and the new stage attempt's task starts again at attempt number 0, so both use the id
    ``{prefix}:{family}-0-0``. The new one wins; the old one, which Spark does not kill (an
    old stage attempt's tasks keep running), opens its transaction on that id after the
    job's decision, before the driver committed it."""
    w.tuning.update(spark_event="stage", late_kill=1.0)
    w.plan.script = [Fault("job0.s0.p0.a0", "task:row", 1, STALL, 1_000_000),
                     Fault("job0", "spark:stage", 1, SPARK),
                     Fault("job0", "fault:driver-after-decision", 1, STALL, 40)]
    sink = KafkaSink(out_partitions=1)
    sink.setup(w, oracle)
    job = BatchJob(w, oracle, "job0", sink, [(0, 0), (0, 1)], 1, "job0")
    resume_when(w, "job0.s0.p0.a0", lambda: bool(oracle.decisions))
    cleanup = [""]

    def main() -> None:
        job.supervise()
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {"job0": job.values()}, {"job0": job.outcome == "ok"})
        oracle.check_decided()

    return Scenario(main, finals, outcome=lambda: job.outcome)


def file_zombie_rename(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the driver stalls just before renaming batch 0's pending file to its final
    name and is replaced; the new driver's recovery renames it; the old one comes back."""
    w.plan.script = [Fault("q.r0", "fs:rename", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [2], 1)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def file_crash_inside_rename(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the driver dies between the link and the unlink of batch 0's move from
    pending to final (both names on one file); the restart commits the batch again. A
    crash is no reason to stop: the query must finish, not stop loudly."""
    w.plan.script = [Fault("q.r0", "fs:unlink", 1, CRASH)]
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [2], 1)

    def finals() -> None:
        check_stream(w, oracle, q)
        if q.outcome != "finished":
            oracle.fail("stuck", f"the query stopped ({q.outcome}) after one crash; last errors: {q.errors[-2:]}")

    return Scenario(q.supervise, finals,
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def file_zombie_decision(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the driver stalls just before writing batch 0's decision and is replaced;
    it comes back while the new driver commits batch 1, and writes its stale decision of
    batch 0 over batch 1's."""
    w.plan.script = [Fault("q.r0", "fs:link", 1, STALL, 1_000_000)]
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [3, 3], 1)

    def deciding(batch: int) -> bool:
        d = newest_file_decision(sink.path / "_kafka_eos" / writer_dir(f"q:{q.query_id}"))
        return d is not None and d.batch_id == batch and d.state.value == "decided"

    resume_when(w, "q.r0", lambda: deciding(1))

    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def _file_query(w: World, oracle: Oracle, script: list) -> tuple:
    w.plan.script = script
    sink = FileSink(w.root / "out")
    q = query(w, oracle, sink, [2, 2], 1)

    def decided(batch: int) -> bool:
        d = newest_file_decision(sink.path / "_kafka_eos" / writer_dir(f"q:{q.query_id}"))
        return d is not None and d.batch_id == batch and d.state.value == "decided"

    resume_when(w, "q.r0", lambda: decided(1))
    return sink, q


def file_zombie_driver_recovery(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the first driver stalls in batch 1's recovery after reading the latest
    decision (batch 0 done), before listing and deleting the writer's staged files; it is
    replaced, and comes back the moment the new driver's decision of batch 1 is durable."""
    sink, q = _file_query(w, oracle, [Fault("q.r0", "fault:driver-after-reading-decision", 2, STALL, 1_000_000)])
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def file_zombie_driver_sweep(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """File sink: the first driver stalls after committing batch 0's files, before its
    post-commit sweep; it is replaced; it comes back the moment the new driver's decision
    of batch 1 is durable, and sweeps the writer's staged files: batch 1's."""
    sink, q = _file_query(w, oracle, [Fault("q.r0", "fault:driver-after-all-commits", 1, STALL, 1_000_000)])
    q.delays = (0.5,)
    return Scenario(q.supervise, lambda: check_stream(w, oracle, q),
                    lambda src, dst: oracle.file_final_rename(sink.path, src, dst), lambda: q.outcome)


def app_retry_after_decision(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """A df.write with txnAppId/txnVersion dies after committing the first of its two
    transactions (its decision is durable); its user runs it again with the same options,
    which finishes the decided write and adds nothing; then the next version."""
    w.plan.script = [Fault("v0.run0", "fault:driver-after-first-commit", 1, CRASH)]
    sink = KafkaSink(out_partitions=1)
    sink.setup(w, oracle)
    rows = {0: [(0, 0), (1, 0)], 1: [(0, 1)]}
    runs = [BatchJob(w, oracle, f"v{v}.run{r}", sink, rows[v], 2, f"v{v}", options={"txnAppId": "etl",
                                                                                  "txnVersion": str(v)})
            for v, r in ((0, 0), (0, 1), (1, 0))]

    def main() -> None:
        for job in runs:
            job.supervise()

    def finals() -> None:
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {"v0": runs[0].values(), "v1": runs[2].values()},
                             {"v0": runs[1].outcome == "ok", "v1": runs[2].outcome == "ok"})
        oracle.check_decided()
        if runs[1].outcome != "ok" or runs[2].outcome != "ok":
            oracle.fail("stuck", f"a run after the failure failed: {runs[1].outcome}, {runs[2].outcome}")

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in runs))



def crashed_job_fenced(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """df.write job1 dies after its tasks wrote, before its decision: its transactions stay
    open. 35 s later (of their 60 s timeout: past the least margin any job's commit asks)
    job0 commits on the prefix while job2, a live job whose transactions are young, stalls
    before its decision until job0 is done. job0 aborts job1's transactions (before their
    timeout), never job2's: job2 commits all of its rows."""
    w.plan.script = [Fault("job1", "fault:driver-before-decision", 1, CRASH),
                     Fault("job2", "fault:driver-before-decision", 1, STALL, 1_000_000)]
    sink = KafkaSink(out_partitions=2)
    sink.setup(w, oracle)
    jobs = [BatchJob(w, oracle, "job1", sink, [(0, 0), (1, 0)], 2, "job1"),
            BatchJob(w, oracle, "job0", sink, [(0, 1)], 1, "job0"),
            BatchJob(w, oracle, "job2", sink, [(1, 1), (0, 2)], 2, "job2")]
    coordinator = w.cluster.coordinator
    left_open: list = []
    cleanup = [""]
    resume_when(w, "job2", lambda: jobs[1].outcome != "not run")

    def ongoing() -> set:
        return {(tid, m.producer_id, m.epoch) for tid, m in coordinator.txns.items() if m.state.name == "ONGOING"}

    def main() -> None:
        jobs[0].supervise()
        crashed = ongoing()
        w.clock.advance(35_000)
        live = w.sched.spawn("job2.user", jobs[2].supervise, "user")
        w.sched.wait_until(lambda: bool(ongoing() - crashed))  # job2's tasks have opened theirs
        jobs[1].supervise()
        left_open.extend(sorted(crashed & ongoing()))
        w.sched.wait_until(lambda: live.done)
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        check_jobs(w, oracle, sink, jobs, cleanup[0])
        assert jobs[0].outcome != "ok", jobs[0].outcome
        assert not left_open, f"the crashed job's transactions were still open after the next job: {left_open}"
        assert jobs[2].outcome == "ok", f"the live job was harmed: {jobs[2].outcome}"

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs) + f",cleanup {cleanup[0]}")


def live_job_shut_out(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    """df.write job1 checks its transactions just inside the margin (29.5 s old of their
    60 s timeout) and stalls as its decision write begins (a write already open would
    hold back job0's read of the log until the broker aborts it); 1.5 s later job0 commits on the
    prefix, finds them past the margin, shuts job1's decision writer out and aborts them.
    job1 comes back: its decision must not land (without the shut-out it did, and the
    decided write was lost); it fails loudly before deciding, nothing of it visible."""
    w.plan.script = [Fault("job1", "fault:driver-before-decision", 1, STALL, 1_000_000),
                     Fault("job1", "kafka:AddPartitionsToTxn", 1, STALL, 1_000_000)]
    sink = KafkaSink(out_partitions=2)
    sink.setup(w, oracle)
    jobs = [BatchJob(w, oracle, "job1", sink, [(0, 0), (1, 0)], 2, "job1"),
            BatchJob(w, oracle, "job0", sink, [(0, 1)], 1, "job0")]
    cleanup = [""]

    def job1() -> Any:
        return next((a for a in w.sched.actors if a.name == "job1"), None)

    def stalled_at(label: str) -> bool:
        actor = job1()
        return actor is not None and actor.state == "paused" and actor.labels.get(label, 0) >= 1

    def main() -> None:
        user = w.sched.spawn("job1.user", jobs[0].supervise, "user")
        w.sched.wait_until(lambda: stalled_at("fault:driver-before-decision"))
        w.clock.advance(29_400)
        w.sched.resume(job1())
        w.sched.wait_until(lambda: stalled_at("kafka:AddPartitionsToTxn"))
        w.clock.advance(1_500)
        jobs[1].supervise()
        w.sched.resume(job1())
        w.sched.wait_until(lambda: user.done)
        cleanup[0] = run_cleanup(w, oracle, sink)

    def finals() -> None:
        visible = check_jobs(w, oracle, sink, jobs, cleanup[0])
        oracle.check_atomic("job1", jobs[0].values(), {v for values in visible.values() for v in values})
        assert jobs[0].outcome.startswith("failed") and "Lost" not in jobs[0].outcome, jobs[0].outcome
        assert jobs[1].outcome == "ok", jobs[1].outcome

    return Scenario(main, finals, outcome=lambda: ",".join(j.outcome for j in jobs) + f",cleanup {cleanup[0]}")
