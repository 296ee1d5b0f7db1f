"""What must hold, checked during a schedule (at every step) and after it.

The rules, from the sink's guarantee (DESIGN.md section 2) and its protocol:

* ``commit-without-decision``: a transaction of a sink is committed (EndTxn(commit)
  accepted) only if a decision naming it (id, producer id, epoch) was made durable first
  (its decision write committed). So nothing of an undecided batch is ever visible to
  ``read_committed``. The file sink: a pending file is renamed to its final name only
  when the writer's newest decision file names it.
* ``disappeared``: what a ``read_committed`` reader saw stays (checked at every step).
* ``duplicate``: a ``read_committed`` reader never sees an output twice, during the run
  or after it.
* ``decided-fenced``: nobody fences (InitProducerId, or EndTxn(abort) from a client) a
  transaction a durable decision names
  (DESIGN.md: "never call it on an id whose transaction may be decided"), except to abandon
  a batch of a query whose checkpoint was lost (the decision is then marked abandoned); nor
  does a decision name a transaction a fence was already aborting (its driver checked the
  transaction, someone fenced it, then the decision was made: the check raced a fencer).
* ``decided-not-visible``: every participant of a durable decision is committed in the
  end, unless the query stopped loudly with a TransactionLostError naming it (a timeout).
* ``false-lost``: a TransactionLostError is only raised for a transaction that really was
  aborted (its records really are not in the output).
* ``lost``: a query that finished shows every input record's output; a batch job that
  succeeded shows all of its rows.
* ``partial``: a batch job's rows are visible all or none.
* ``order``: per input partition and output partition, outputs appear in input order.
* ``left-open``: when a query finishes, no transaction of its sink that was already open
  when the sink last listed its open transactions is still open (the LSO reaches the
  high watermark, except for attempts that started after that sweep: documented).
* ``unexpected-error``: the product raised something outside its exception tree.
* ``unnamed-conflict``: two streams on one prefix: the loud stop names both queries.
* ``stuck``: a query failed retriably on every restart after the faults stopped.
* ``decided-file-deleted``: the file sink never deletes a staged file that a durable
  decision names (one that was its writer's newest record when created) before that file
  is final, unless the batch was recorded abandoned.
* ``file-lost``: the file sink's pending files do not time out, so a
  ``TransactionLostError`` from it means the protocol deleted decided files, unless a
  test deleted staged files on purpose (``files_deleted_on_purpose``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.table_sink.handles import StagedFiles
from kafka_eos_ds.twophase.identity import STREAM_FAMILIES
from kafka_eos_ds.twophase.protocol import ABANDONED, Decision
from tests.simulation.model.logs import OFFSETS_TOPIC
from tests.simulation.world import World


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str
    step: int

    def __str__(self) -> str:
        return f"[{self.rule}] {self.detail} (step {self.step})"


def parse_value(value: str) -> tuple[str, int, int]:
    """An output value ``label:input partition:offset``."""
    label, p, o = value.rsplit(":", 2)
    return label, int(p), int(o)


class Oracle:
    def __init__(self, w: World) -> None:
        self.w = w
        self.violations: list[Violation] = []
        self.prefixes: dict[str, str] = {}             # sink prefix -> commit-log topic
        self.topics: list[str] = []                    # output topics watched
        self.decided: dict[tuple[str, int, int], tuple[str, int]] = {}  # (id, pid, epoch) -> (query, batch)
        self.fenced: dict[tuple[str, int, int], str] = {}  # open transactions aborted by a fence: by whom
        self.decisions: list[Decision] = []
        self.committed: set[tuple[str, int, int]] = set()
        self.aborted: set[tuple[str, int, int]] = set()
        self._epochs: dict[tuple[str, int, int], int] = {}  # (id, pid, serial) -> epoch of its records
        self._began: dict[str, int] = {}                    # id -> step its current transaction began
        self._seen: dict[tuple[str, int], tuple[int, list]] = {}
        self.claims: list[tuple[str, int, set[str]]] = []  # TransactionLostErrors: (query, batch, ids)
        self.unknown: set[tuple[str, int]] = set()          # batches recovery said it cannot tell
        self.excused_queries: set[str] = set()  # queries stopped loudly for sharing ids: their decisions' fate
        # The file sink: staged file -> (its final file, the decision's query and batch),
        # for every staged file a durable decision named.
        self.decided_files: dict[str, tuple[str, str, int]] = {}
        self.files_deleted_on_purpose = False
        self._values: set[str] = set()
        w.cluster.coordinator.observers.append(self.on_txn)
        w.checks.append(self.check_now)

    def fail(self, rule: str, detail: str) -> None:
        v = Violation(rule, detail, self.w.sched.step)
        if v.rule not in {x.rule for x in self.violations} or len(self.violations) < 20:
            self.violations.append(v)
        self.w.sched.log(f"VIOLATION {v}")

    def watch_kafka_sink(self, prefix: str, commit_log: str, topics: Iterable[str]) -> None:
        self.prefixes[prefix] = commit_log
        self.topics += [t for t in topics if t not in self.topics]

    # -- the coordinator's transitions ------------------------------------------

    def _sink_of(self, transactional_id: str) -> str | None:
        return next((p for p in self.prefixes if transactional_ids.parse(p, transactional_id) is not None), None)

    def on_txn(self, event: str, meta: Any) -> None:
        key = (meta.transactional_id, meta.producer_id, meta.serial)
        if event == "begin":
            self._epochs[key] = meta.epoch
            self._began[meta.transactional_id] = self.w.sched.step
            return
        epoch = self._epochs.get(key, meta.epoch)
        txn = (meta.transactional_id, meta.producer_id, epoch)
        if event in ("fence", "end-abort") and txn not in self.committed:
            # Every fence of an open transaction (InitProducerId, or a driver's EndTxn(abort)
            # at its exact epoch), by whom: one that a decision names (now, or later, when
            # the decision raced the fence) ends up aborted.
            who = self.w.sched.current.name if self.w.sched.current else "?"
            self.fenced.setdefault(txn, f"{who} at step {self.w.sched.step}")
            if txn in self.decided:
                self.w.sched.log(f"  !! {who} fences {txn}, which a durable decision names")
        if event not in ("prepare-commit", "prepare-abort"):
            return
        if event == "prepare-abort":
            self.aborted.add(txn)
            return
        self.committed.add(txn)
        if meta.transactional_id.endswith(".decisions"):
            for topic, partition in meta.partitions:
                if topic == OFFSETS_TOPIC:
                    continue  # a batch without output: its progress rides with its done record
                for record in self.w.cluster.log(topic, partition).open_records(meta.producer_id):
                    if record.value is None:
                        continue  # a tombstone: a finished job's record dropped
                    decision = Decision.from_json(json.loads(record.value), KafkaHandle.from_json)
                    self.decisions.append(decision)
                    for p in decision.participants:
                        self.decided[(p.id, p.handle.producer_id, p.handle.epoch)] = \
                            (decision.query_id, decision.batch_id)
            return
        if self._sink_of(meta.transactional_id) is not None and txn not in self.decided:
            self.fail("commit-without-decision", f"EndTxn(commit) of {txn} accepted, but no durable decision "
                                                 "names that transaction")

    # -- at every step ------------------------------------------------------------

    def check_now(self) -> None:
        for (topic, partition), log in self.w.cluster.logs.items():
            if topic not in self.topics:
                continue
            marks = (log.high_watermark(), log.last_stable_offset())
            seen = self._seen.get((topic, partition))
            if seen is not None and seen[0] == marks:
                continue
            values = [r.value for r in log.read_committed()]
            before = seen[1] if seen is not None else []
            if values[:len(before)] != before:
                self.fail("disappeared", f"{topic}-{partition}: read_committed saw {before}, now {values}")
            for value in values[len(before):]:
                if value in self._values:
                    self.fail("duplicate", f"{value} is visible twice (seen by a read_committed reader of "
                                           f"{topic}-{partition} while the query runs)")
                self._values.add(value)
            self._seen[(topic, partition)] = (marks, values)

    # -- after the schedule ---------------------------------------------------------

    def kafka_visible(self) -> dict[tuple[str, int], list[str]]:
        return {tp: [r.value for r in log.read_committed()] for tp, log in sorted(self.w.cluster.logs.items())
                if tp[0] in self.topics}

    def check_outputs(self, by_partition: dict[Any, list[str]], expected: dict[str, set[str]],
                      complete: dict[str, bool]) -> None:
        """``expected``: per label, every value it may show; ``complete``: per label, whether all
        must be visible (the query finished, the job succeeded)."""
        seen: dict[str, int] = {}
        for where, values in by_partition.items():
            last: dict[tuple[str, int], int] = {}
            for value in values:
                seen[value] = seen.get(value, 0) + 1
                label, p, o = parse_value(value)
                if last.get((label, p), -1) >= o:
                    self.fail("order", f"{where}: {value} after offset {last[(label, p)]} of input partition {p}")
                last[(label, p)] = o
        dups = sorted(v for v, n in seen.items() if n > 1)
        if dups:
            self.fail("duplicate", f"visible more than once: {dups[:8]}{' ...' if len(dups) > 8 else ''}")
        for label, values in expected.items():
            missing = sorted(values - set(seen))
            if complete.get(label) and missing:
                self.fail("lost", f"{label}: {len(missing)} of {len(values)} outputs never became visible: "
                                  f"{missing[:8]}{' ...' if len(missing) > 8 else ''}")
        stray = sorted(v for v in seen if parse_value(v)[0] not in expected or v not in expected[parse_value(v)[0]])
        if stray:
            self.fail("stray", f"visible outputs nobody wrote: {stray[:8]}")

    def check_atomic(self, label: str, rows: set[str], visible: set[str]) -> None:
        shown = rows & visible
        if shown and shown != rows:
            self.fail("partial", f"{label}: {len(shown)} of its {len(rows)} rows are visible")

    def lost_claim(self, error: BaseException) -> None:
        """A TransactionLostError ("Batch N of Q was decided but k of its n transaction(s)
        were aborted instead of committed (a, b); ..."): remember what it claims."""
        m = re.search(r"Batch (\d+) of (?:query )?(\S+) was decided but .*? instead of committed \(([^)]*)\)",
                      str(error))
        if m is None:
            self.fail("unexpected-error", f"a TransactionLostError that names no batch: {error}")
            return
        self.claims.append((m[2], int(m[1]), {i.strip() for i in m[3].split(",") if i.strip()}))

    def unknown_claim(self, error: BaseException) -> None:
        """A loud "Cannot tell whether batch N of query Q ... had started to commit": recovery
        refuses to guess, by design; that batch's participants are excused (not claimed lost)."""
        m = re.search(r"Cannot tell whether batch (\d+) of query (\S+)", str(error))
        if m is not None:
            self.unknown.add((m[2], int(m[1])))

    def check_decided(self) -> None:
        """Every durable decision's participants are committed, except those a
        TransactionLostError named (which must really not be committed) and those of a batch
        abandoned after its query's checkpoint was lost."""
        excused: set[tuple[str, int, int]] = set()
        false: set[tuple[str, int, int]] = set()
        for query, batch, ids in self.claims:
            for tid in ids:
                # An id can be in several decisions of one batch (the writes of a micro-batch
                # inside foreachBatch share their ids): the claim is false only if every
                # decided transaction of that id in that batch committed.
                named = {txn for txn, qb in self.decided.items() if qb == (query, batch) and txn[0] == tid}
                if named and named <= self.committed:
                    false |= named
                excused |= named - self.committed
        abandoned = {(d.query_id, d.batch_id) for d in self.decisions if d.state == ABANDONED}
        for txn in sorted(false):
            self.fail("false-lost", f"a TransactionLostError said {txn} was aborted, but it committed: its records "
                                    "are in the output")
        for txn in sorted(set(self.decided) - self.committed):
            if self.decided[txn] in abandoned or self.decided[txn][0] in self.excused_queries:
                continue
            if txn in self.fenced:
                self.fail("decided-fenced", f"{txn}, named by a durable decision of batch {self.decided[txn][1]}, "
                                            f"was aborted by a fence from {self.fenced[txn]} (and the batch was "
                                            "not recorded abandoned)")
            elif txn not in excused and self.decided[txn] not in self.unknown:
                self.fail("decided-not-visible", f"{txn} was named by a durable decision but never committed, and "
                                                 "no TransactionLostError said so")

    def check_no_leftovers(self, run: str, prefix: str, families: str = STREAM_FAMILIES, writer: str = "") -> None:
        """At the moment a query finishes: no open transaction of its writer (``families``
        of the sink's ids, the stream's own by default) that a listing of them by the run
        that finished saw (it should have been aborted), and no decision write of the
        writer left open. Only the finishing run's own sweeps count: a zombie run of the
        query may list, and later abort, what its own tasks opened after the live run's
        last sweep (excused, documented) while the check runs."""
        pattern = transactional_ids.pattern(prefix, families)
        listed = [step for step, p, who in self.w.listings if p == pattern and who == run]
        if not listed:
            return
        decisions = transactional_ids.decision_writer(prefix, writer)
        tc = self.w.cluster.coordinator
        for tid, meta in sorted(tc.txns.items()):
            if meta.state.value != "Ongoing" or self._began.get(tid, -1) >= listed[-1]:
                continue
            if transactional_ids.in_families(prefix, tid, families):
                self.fail("left-open", f"{tid} (pid {meta.producer_id} e{meta.epoch}) is still open when the query "
                                       f"finished; it was already open at the sink's last sweep (step {listed[-1]})")
            if tid == decisions:
                self.fail("left-open", f"the decision writer {tid} has a transaction open since before the sink's "
                                       "last sweep when the query finished")

    def file_final_rename(self, root: Path, src: str, dst: str) -> None:
        """A pending file became final (just now): its writer's newest decision must name it."""
        pending = Path(src).parent
        if pending.name != "pending" or pending.parent.parent != root / "_kafka_eos" or Path(dst).parent != root:
            return
        decision = newest_file_decision(pending.parent)
        rel = Path(src).relative_to(root).as_posix()
        if decision is None or not any(f.pending == rel for p in decision.participants for f in p.handle.files):
            self.fail("commit-without-decision", f"{rel} renamed to its final name, but its writer's newest decision "
                                                 f"does not name it ({decision.state.value if decision else 'none'})")


    def file_decision_created(self, path: str) -> None:
        """A file-sink record was just created at ``path`` (``<root>/_kafka_eos/<writer>/
        decisions/<n>.json``): durable if it is the writer's newest (a record below a newer
        one is refused by its writer and never read)."""
        created = Path(path)
        if created.parent.name != "decisions" or not created.stem.isdigit():
            return
        numbers = [int(p.stem) for p in created.parent.iterdir() if p.suffix == ".json" and p.stem.isdigit()]
        if int(created.stem) != max(numbers):
            return
        record = json.loads(created.read_text())
        if record.get("state") != "decided":
            return
        decision = Decision.from_json(record, StagedFiles.from_json)
        root = created.parents[3]
        for p in decision.participants:
            for f in p.handle.files:
                if f.pending:
                    self.decided_files[str(root / f.pending)] = (str(root / f.final), decision.query_id,
                                                                 decision.batch_id)

    def file_deleted(self, path: str) -> None:
        """A file is about to be deleted: not a decided staged file that is not final yet."""
        if path not in self.decided_files or not os.path.exists(path):
            return
        final, query, batch = self.decided_files[path]
        if os.path.exists(final):
            return  # committed: the second half of its move, or a re-commit's clean-up
        newest = newest_file_decision(Path(path).parent.parent)
        if newest is not None and newest.state == ABANDONED and (newest.query_id, newest.batch_id) == (query, batch):
            return
        who = self.w.sched.current.name if self.w.sched.current else "?"
        self.fail("decided-file-deleted", f"{who} deleted {os.path.basename(path)}, which the durable decision of "
                                          f"batch {batch} of {query} names, before it was final")

    def check_file_lost(self) -> None:
        """A TransactionLostError of the file sink (its pending files do not time out)."""
        if self.claims and not self.files_deleted_on_purpose:
            query, batch, ids = self.claims[0]
            self.fail("file-lost", f"the file sink said batch {batch} of {query} was lost ({sorted(ids)}): its "
                                   "decided files were deleted before their commit")


def newest_file_decision(writer: Path) -> Decision | None:
    """A file-sink writer's newest decision (its highest-numbered ``decisions/<n>.json``)."""
    try:
        numbered = [p for p in (writer / "decisions").iterdir() if p.suffix == ".json" and p.stem.isdigit()]
    except FileNotFoundError:
        return None
    if not numbered:
        return None
    record = json.loads(max(numbered, key=lambda p: int(p.stem)).read_text())
    # A claim made before any decision holds none.
    return Decision.from_json(record, StagedFiles.from_json) if "state" in record else None
