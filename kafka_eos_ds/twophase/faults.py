"""Named crash points of the protocol, a hook for crash tests; free in production.

The protocol calls :func:`check` at each point (``task-before-precommit``,
``task-after-precommit``, ``driver-before-decision``, ``driver-after-decision``,
``driver-after-progress``, ``driver-after-first-commit``, ``commit-raise``,
``driver-after-all-commits``, ``driver-after-done``, ``driver-after-reading-decision`` in
recovery and abort, and ``driver-after-claim`` in an exact fence, between its claim and its
aborts; the Kafka sink's decision log adds ``decision-before-commit``, inside
a decision write). Unless a hook is installed that is
one global lookup and a ``None`` test.

A test installs a hook with :func:`install`; in Spark's worker processes, which a test
cannot reach, the hook is named by ``KAFKA_EOS_FAULT_HOOK="module:function"`` and loaded
once, when this module is first imported. The project's crash tests use
``kafka_eos_tools.faults:inject`` (docs/dev/testing.md).
"""

from __future__ import annotations

import importlib
import os
from typing import Protocol

HOOK_ENV = "KAFKA_EOS_FAULT_HOOK"


class FaultHook(Protocol):
    def __call__(self, point: str, *, batch: int | None, partition: int | None,
                 attempt: int | None) -> None: ...


_hook: FaultHook | None = None


def install(hook: FaultHook | None) -> None:
    """Call ``hook`` at every fault point from now on (None: remove it)."""
    global _hook
    _hook = hook


def check(point: str, *, batch: int | None = None, partition: int | None = None,
          attempt: int | None = None) -> None:
    if _hook is not None:
        _hook(point, batch=batch, partition=partition, attempt=attempt)


def _load(spec: str) -> FaultHook:
    module, _, name = spec.partition(":")
    hook: FaultHook = getattr(importlib.import_module(module), name or "inject")
    return hook


if os.environ.get(HOOK_ENV):
    install(_load(os.environ[HOOK_ENV]))
