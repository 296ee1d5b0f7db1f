"""Directed schedules: the interleavings that broke the protocol, each set up on purpose.

Each builds a scenario whose faults are scripted (by actor, step label and occurrence,
so they land in the same place whatever the seed), leaving only the interleaving of the
other actors to the seed. ``test_simulation.py`` runs each over several seeds. The table
:data:`DIRECTED` lists them: those of defects fixed are regression tests, the others the
defects known today (:mod:`.directed_streams`, :mod:`.directed_writes`).
"""

from __future__ import annotations

import random
from typing import Callable

from tests.simulation.directed_plans import (
    plan_grows_after_decision,
    plan_shrinks_after_first_commit,
    plan_shrinks_before_decision,
)
from tests.simulation.directed_streams import (
    abandon_before_log,
    checkpoint_lost_idle,
    expired_id_after_commit,
    first_lost_rest_committed,
    shared_prefix,
    stale_commit_log_read,
    zombie_driver_carry,
    zombie_driver_recovery,
    zombie_driver_sweep,
    zombie_recovery_carry,
    zombie_step_before_commit,
)
from tests.simulation.directed_writes import (
    app_retry_after_decision,
    concurrent_batch_jobs,
    crashed_job_fenced,
    file_crash_inside_rename,
    file_zombie_decision,
    file_zombie_driver_recovery,
    file_zombie_driver_sweep,
    file_zombie_rename,
    finish_jobs_forget,
    foreach_batch,
    foreach_file_zombie,
    foreach_file_zombie_abort,
    foreach_zombie_ordinal,
    foreach_zombie_step_before_commit,
    live_job_shut_out,
    stage_retry_same_id,
)
from tests.simulation.invariants import Oracle
from tests.simulation.scenario import Scenario
from tests.simulation.world import World

# name -> (builder, the rules it breaks today, what it sets up). A schedule whose defect is
# fixed stays as a regression test (no rules): it must keep the guarantee on every seed.
DIRECTED: dict[str, tuple[Callable[[World, Oracle, random.Random], Scenario], set, str]] = {
    "foreach-batch-writes": (foreach_batch, set(),
                             "fixed: df.write inside foreachBatch committed only the stream's first write"),
    "shared-prefix-done-mark": (shared_prefix, set(),
                                "fixed: a df.write's decision on the stream's prefix erased the stream's done mark"),
    "stale-commit-log-read": (stale_commit_log_read, set(),
                              "fixed: another sink's open decision write hid newer decisions (the reader now waits "
                              "for the last stable offset; the step fails retriably until the broker aborts it)"),
    "zombie-driver-carry": (zombie_driver_carry, set(),
                            "fixed at commit (the progress is attached before the decision, so a late "
                            "AddOffsetsToTxn meets a fenced epoch); see zombie-recovery-carry"),
    "concurrent-batch-jobs": (concurrent_batch_jobs, set(),
                              "fixed: two df.write jobs on one prefix shared transactional ids"),
    "app-retry-after-decision": (app_retry_after_decision, set(),
                                 "a txnAppId write that died after its decision, run again by its user: finished, "
                                 "nothing added"),
    "abandon-before-log": (abandon_before_log, set(),
                           "fixed: abandoning fenced before recording 'abandoned'; a crash between the two steps "
                           "(now record, then fence) leaves the next driver going on"),
    "zombie-driver-recovery": (zombie_driver_recovery, set(),
                               "fixed: a driver that read the log, stalled and came back fenced (recovery) the open "
                               "transactions of a batch a newer driver decided meanwhile (every fence now observes "
                               "the exact transactions, claims the step's decision writer, then aborts those only)"),
    "zombie-driver-sweep": (zombie_driver_sweep, set(),
                            "fixed: a driver that stalled after committing batch 0 came back and swept the sink's "
                            "open transactions (its post-commit sweep, then Spark's abort), aborting a batch a newer "
                            "driver decided meanwhile (fences now claim the decision writer and abort exactly)"),
    "zombie-step-before-commit": (zombie_step_before_commit, set(),
                                  "fixed: a zombie driver's whole recovery ran between a newer run's planner and its "
                                  "commit: it claimed the decision writer before the commit step fenced it, and "
                                  "aborted the transactions that commit step then decided (the commit now refuses "
                                  "the batch undecided when its writer was claimed after the planner's position)"),
    "zombie-recovery-carry": (zombie_recovery_carry, set(),
                              "fixed: a recovery that re-attached a decided batch's progress stalled before "
                              "AddOffsetsToTxn; back after a newer driver committed the batch, its AddOffsetsToTxn "
                              "opened a new transaction under the still-current epoch and committed: the group's "
                              "offsets went back (decisions are now marked as carrying their progress, and "
                              "recovery attaches it only to older records)"),
    "checkpoint-lost-idle": (checkpoint_lost_idle, set(),
                             "a model error, fixed: the model skipped a fresh query's batch 0 when it found no "
                             "new input, and so never ran the recovery that finishes the lost query's decided "
                             "batch; Spark runs that batch (integration/test_sink_crash.py, test_7 ... idle)"),
    "expired-id-after-commit": (expired_id_after_commit, set(),
                                "fixed: a committed transaction whose id expired (or moved to a newer epoch) was "
                                "classified lost (it is now 'cannot tell': a loud stop that names what to check)"),
    "file-crash-inside-rename": (file_crash_inside_rename, set(),
            "fixed: a driver that died between the link and the unlink of a local move (both names on one "
            "file) left a batch every restart refused to commit ('another query ... same query id')"),
    "file-zombie-decision": (file_zombie_decision, set(),
            "fixed: a zombie driver of the file sink wrote its stale decision over a newer one (decisions are now "
            "numbered files created only if absent)"),
    "file-zombie-rename": (file_zombie_rename, set(),
            "fixed: a zombie driver's commit rename failed with a raw FileNotFoundError (a rename done meanwhile "
            "is a commit)"),
    "file-zombie-driver-recovery": (file_zombie_driver_recovery, set(),
            "fixed: a file-sink driver that read the decisions, stalled and came back deleted (recovery) the pending "
            "files of a batch a newer driver decided meanwhile (a fence now deletes only under a claim of the "
            "decision log made after its listing)"),
    "file-zombie-driver-sweep": (file_zombie_driver_sweep, set(),
            "fixed: a file-sink driver that stalled after committing batch 0 came back and swept the pending files "
            "of batch 1, which a newer driver had decided meanwhile"),
    "first-lost-rest-committed": (first_lost_rest_committed, set(),
                                  "fixed: a batch whose first transaction (with its progress) the broker aborted "
                                  "after the decision had its other transactions committed; a new query after a "
                                  "lost checkpoint abandoned it and wrote their records again (the batch is now "
                                  "abandoned whole and run again)"),
    "stage-retry-same-id": (stage_retry_same_id, {"decided-fenced"},
                            "a resubmitted stage's task starts again at attempt number 0, on the id an old stage "
                            "attempt's task still uses: the later of the two to start its transaction aborts the "
                            "other's, after the write's decision (every writer kind: the ids carry Spark's attempt "
                            "number, which restarts per stage attempt)"),
    "foreach-zombie-ordinal": (foreach_zombie_ordinal, set(),
                               "fixed: two drivers of one query in one micro-batch (a zombie and its replacement): "
                               "the zombie recorded that it skipped a write the other committed; the other's next "
                               "write read that record, counted itself as the run's first write again and skipped "
                               "itself, its rows lost (each record now keeps every run's ordinal)"),
    "crashed-job-fenced": (crashed_job_fenced, set(),
                           "fixed: a df.write that died after its tasks wrote left its transactions open (holding "
                           "back read_committed readers) until their timeout; the next job aborts them once no job "
                           "can decide them, never a live job's"),
    "live-job-shut-out": (live_job_shut_out, set(),
                          "a job stalled inside its decision write past the margin: the next job's sweep shuts its "
                          "decision writer out before aborting its transactions, so it fails loudly, nothing visible"),
    "finish-jobs-forget": (finish_jobs_forget, set(),
            "fixed: a df.write finishing another job's decision dropped it when that failed part-way (it is "
            "recorded done, or kept)"),
    "plan-shrinks-after-first-commit": (plan_shrinks_after_first_commit, set(),
            "the source plans fewer tasks after a crash in a commit: the recovery commits the decided ids of "
            "task numbers the new plan no longer has"),
    "plan-shrinks-before-decision": (plan_shrinks_before_decision, set(),
            "the source plans fewer tasks after a crash before the decision: the leftover ids of the higher task "
            "numbers are aborted (recovery lists the prefix's open ids, not the plan's)"),
    "plan-grows-after-decision": (plan_grows_after_decision, set(),
            "the source plans more tasks after a crash after the decision: the batch is finished before any new "
            "task opens an id"),
    "foreach-zombie-step-before-commit": (foreach_zombie_step_before_commit, set(),
            "fixed: a zombie run's commit of a df.write inside foreachBatch claimed the write's decision writer "
            "between the live run's planner and commit of the same write, and aborted the transaction that commit "
            "then decided (the commit now refuses the write undecided: its planner read the commit log's position)"),
    "foreach-file-zombie": (foreach_file_zombie, set(),
            "fixed: a zombie file-sink driver recorded its write done over a newer decision and wrote the "
            "micro-batch again"),
    "foreach-file-zombie-abort": (foreach_file_zombie_abort, set(),
            "fixed: a zombie driver's abort claimed the decision log and, stalled before deleting, deleted a "
            "df.write's staged file (inside foreachBatch) that the live driver's commit had decided meanwhile: "
            "that decision took whatever number was free (it now goes right after the number each task read "
            "before staging, which the claim took)"),
}
