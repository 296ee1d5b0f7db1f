"""The ports of :mod:`.protocol` as the committer calls them, each call with its retry
policy, declared once, here.

A call whose failure may be transient (a coordinator moving, a broker restarting) is
retried by :func:`.retrying.retrying` for the commit budget, then fails retriably with
the text below and what the failure leaves behind: ``RESTART`` (nothing was decided by
the step) or ``FINISHES`` (the decision is stored; a restart finishes it). A call that
is not retried says so, and is passed to the sink's port as it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Mapping, Sequence

from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import (
    Decision,
    DecisionLog,
    Fences,
    H,
    Instance,
    Outcome,
    Participant,
    Participants,
    ProgressStore,
)
from kafka_eos_ds.twophase.retrying import NOTHING_DECIDED, retrying

RESTART = NOTHING_DECIDED
FINISHES = "The commit decision is stored; restarting the query finishes the commit."
_READ = "Could not read the sink's decisions"


@dataclass(frozen=True)
class Retry:
    """The retry policy: ``call()`` until it answers something other than ``again``, for
    ``timeout_s`` (the committer's ``commit_timeout_s``)."""

    timeout_s: float
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def __call__(self, call: Callable[[], Any], failure: str, then: str, again: Any = None) -> Any:
        return retrying(call, failure, self.timeout_s, again=again, then=then, sleep=self.sleep, clock=self.clock)


class RetryingDecisionLog(Generic[H]):
    """A :class:`~.protocol.DecisionLog` with its policies. ``write`` is not retried:
    ``commit``'s own records (its decision, a skipped or empty write's, its done record)
    are written once, and a failure fails the step with the log's error. The other
    writes are named by what they record."""

    def __init__(self, log: DecisionLog[H], retry: Retry) -> None:
        self.log, self._retry = log, retry

    def latest(self, key: str) -> Decision[H] | None:
        latest: Decision[H] | None = self._retry(lambda: self.log.latest(key), _READ, RESTART)
        return latest

    def latest_of(self, kind: str) -> Decision[H] | None:
        latest: Decision[H] | None = self._retry(lambda: self.log.latest_of(kind), _READ, RESTART)
        return latest

    def unfinished(self, kind: str) -> list[tuple[str, Decision[H]]]:
        found: list[tuple[str, Decision[H]]] = self._retry(lambda: self.log.unfinished(kind), _READ, RESTART)
        return found

    def write(self, key: str, decision: Decision[H]) -> None:
        self.log.write(key, decision)  # not retried (above)

    def record_done(self, key: str, done: Decision[H]) -> None:
        """A finished decision's done record."""
        self._retry(lambda: self.log.write(key, done), f"Could not record batch {done.batch_id} done", FINISHES)

    def record_abandoned(self, key: str, abandoned: Decision[H]) -> None:
        self._retry(lambda: self.log.write(key, abandoned), "Could not record the abandoned batch", RESTART)

    def record_ending(self, key: str, decision: Decision[H]) -> None:
        """How a batch job's commit ended (lost, untold)."""
        self._retry(lambda: self.log.write(key, decision), f"Could not record how job {key}'s commit ended", RESTART)

    def forget(self, key: str) -> None:
        self._retry(lambda: self.log.forget(key), f"Could not record {key} done", RESTART)


class RetryingParticipants(Generic[H]):
    """:class:`~.protocol.Participants` with their policies; ``superseded`` and the
    messages are not retried (they ask the sink nothing that can fail transiently)."""

    def __init__(self, participants: Participants[H], retry: Retry) -> None:
        self.participants, self._retry = participants, retry

    def commit(self, participant: Participant[H]) -> Outcome:
        outcome: Outcome = self._retry(lambda: self.participants.commit(participant),
                                       f"Could not learn the outcome of committing {participant.id}", FINISHES,
                                       again=Outcome.RETRY)
        return outcome

    def unfit(self, participants: Sequence[Participant[H]], time_needed_s: float) -> str | None:
        problem: str | None = self._retry(lambda: self.participants.unfit(participants, time_needed_s),
                                          "Could not check the batch's transactions before its decision", RESTART)
        return problem

    def fence(self, participant_id: str) -> None:
        self._retry(lambda: self.participants.fence(participant_id), f"Could not abort {participant_id}", RESTART)

    def open_ids(self, write: WriteId) -> Sequence[str]:
        ids: Sequence[str] = self._retry(lambda: self.participants.open_ids(write),
                                         "Could not list the sink's open transactions", RESTART)
        return ids

    def superseded(self, participant: Participant[H]) -> Sequence[str]:
        return self.participants.superseded(participant)

    def lost_message(self, participants: Sequence[Participant[H]]) -> str:
        return self.participants.lost_message(participants)

    def unknown_outcome_message(self, participants: Sequence[Participant[H]]) -> str:
        return self.participants.unknown_outcome_message(participants)


class RetryingProgressStore(Generic[H]):
    """A :class:`~.protocol.ProgressStore` with its policies; the messages are not retried."""

    def __init__(self, store: ProgressStore[H], retry: Retry) -> None:
        self.store, self._retry = store, retry

    def carry(self, progress: Mapping[str, Any], first: Participant[H]) -> None:
        self._retry(lambda: self.store.carry(progress, first), f"Could not attach the batch's progress to {first.id}",
                    RESTART)

    def started(self, progress: Mapping[str, Any], first: Participant[H]) -> bool | None:
        started: bool | None = self._retry(lambda: self.store.started(progress, first),
                                           f"Could not learn whether {first.id} committed", RESTART)
        return started

    def resumes_before(self, progress: Mapping[str, Any], reached: bool = True) -> str | None:
        problem: str | None = self._retry(lambda: self.store.resumes_before(progress, reached=reached),
                                          "Could not read where the output ends", RESTART)
        return problem

    def abandoned_message(self, progress: Mapping[str, Any], first: Participant[H]) -> str:
        return self.store.abandoned_message(progress, first)

    def unknown_message(self, progress: Mapping[str, Any], first: Participant[H]) -> str:
        return self.store.unknown_message(progress, first)


class RetryingFences:
    """:class:`~.protocol.Fences` with their policies."""

    def __init__(self, fences: Fences, retry: Retry) -> None:
        self.fences, self._retry = fences, retry

    def observe(self, ids: Sequence[str]) -> Sequence[Instance]:
        found: Sequence[Instance] = self._retry(lambda: self.fences.observe(ids),
                                                "Could not describe the sink's open transactions", RESTART)
        return found

    def claim(self, targets: Sequence[Instance]) -> None:
        self._retry(lambda: self.fences.claim(targets), "Could not claim the commit-log writer before aborting",
                    RESTART)

    def abort_exact(self, instance: Instance) -> bool:
        aborted: bool = self._retry(lambda: self.fences.abort_exact(instance), f"Could not abort {instance.id}",
                                    RESTART)
        return aborted

    def abandoned(self, write: WriteId) -> Sequence[Instance]:
        found: Sequence[Instance] = self._retry(lambda: self.fences.abandoned(write),
                                                "Could not describe other jobs' open transactions", RESTART)
        return found

    def shut_out(self, instances: Sequence[Instance]) -> None:
        self._retry(lambda: self.fences.shut_out(instances), "Could not fence other jobs' commit-log writers",
                    RESTART)


class Ports(Generic[H]):
    """The sink's ports as the committer's steps call them (with the policies above), and
    the sink's ``publish``. ``progress`` and ``fences`` are optional ports (None: absent)."""

    def __init__(self, decisions: DecisionLog[H], participants: Participants[H],
                 progress_store: ProgressStore[H] | None, fences: Fences | None,
                 publish: Callable[[Decision[H]], None] | None, retry: Retry) -> None:
        self.decisions = RetryingDecisionLog(decisions, retry)
        self.participants = RetryingParticipants(participants, retry)
        self._progress = RetryingProgressStore(progress_store, retry) if progress_store is not None else None
        self.fences = RetryingFences(fences, retry) if fences is not None else None
        self._publish, self._retry = publish, retry

    @property
    def progress(self) -> RetryingProgressStore[H]:
        if self._progress is None:
            raise TypeError("this sink's decisions carry progress but its committer has no progress_store")
        return self._progress

    def publish(self, decision: Decision[H]) -> None:
        """What the sink does once a decision's participants are all committed (idempotent)."""
        if self._publish is not None:
            publish = self._publish
            self._retry(lambda: publish(decision), f"Could not publish batch {decision.batch_id}", FINISHES)
