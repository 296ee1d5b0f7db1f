"""The abort sweep on the driver: fence what an undecided write left open (the policy is
:func:`.recovery.plan_abort`, pure), then sweep again for a short while."""

from __future__ import annotations

import logging
from typing import Callable, Generic, Iterable

from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import DECIDED, H, Participant
from kafka_eos_ds.twophase.recovery import plan_abort
from kafka_eos_ds.twophase.steps import Steps

log = logging.getLogger(__name__)


class Aborting(Generic[H]):
    """The abort sweep over ``steps``; ``abort_grace_s``, ``sleep``, ``clock``: as
    :class:`~.committer.TwoPhaseCommitter`."""

    def __init__(self, steps: Steps[H], abort_grace_s: float, sleep: Callable[[float], None],
                 clock: Callable[[], float]) -> None:
        self.steps, self.ports = steps, steps.ports
        self.abort_grace_s, self._sleep, self._clock = abort_grace_s, sleep, clock

    def abort(self, write: WriteId | None, messages: Iterable[Participant[H] | None],
              fallback: WriteId | None = None) -> None:
        """:meth:`.committer.TwoPhaseCommitter.abort`."""
        messages = list(messages)
        participants = self.ports.participants
        superseded = [i for p in messages if p is not None for i in participants.superseded(p)]
        owner = write if write is not None else fallback
        latest = self.ports.decisions.latest(write.key) if write is not None else None
        batch = write.version if write is not None else None
        faults.check("driver-after-reading-decision", batch=batch)
        if latest is not None and write is not None and latest.same_batch(write.app, write.version) \
                and latest.state == DECIDED:
            log.warning("batch %s of %s was decided; its transactions are left for recovery to finish",
                        write.version, write.app)
        app, version = (write.app, write.version) if write is not None else (None, -1)
        self.steps.fence(plan_abort(latest, app, version, messages, superseded,
                                    participants.open_ids(owner) if owner else ()))
        # Tasks killed when Spark cancelled the stage may still be finishing their
        # write after this abort started (their Python workers notice late); sweep again
        # for a short while so their transactions do not hold back readers.
        deadline = self._clock() + self.abort_grace_s
        while self._clock() < deadline:
            self._sleep(0.5)
            self.steps.fence(plan_abort(latest, app, version, (), (), participants.open_ids(owner) if owner else ()))
