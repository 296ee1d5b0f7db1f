"""The protocol simulation as tests: the gate (a bounded number of seeded schedules per
shape, seconds), the full profile (many more, ``full`` marker), the directed schedules of
known defects (xfail, strict: each flips to a failure once its defect is fixed, so the
mark is removed with the fix), determinism, and planted defects the invariants must see.

A gate failure prints each failing seed with its faults; replay one with
``python -m tests.simulation --replay SHAPE SEED --faults '...'``.
"""

from __future__ import annotations

import pytest

from tests.simulation import adapters, directed
from tests.simulation.explorer import fault_spec, run_one
from tests.simulation.faults import CRASH, Fault
from tests.simulation.shapes import KNOWN_DEFECTS, SHAPES
from tests.simulation.twophase_plants import forgetful_log, sweepless_committer, undurable_decisions

RANDOM_SHAPES = sorted(SHAPES)
GATE_SCHEDULES = 20
FULL_SCHEDULES = 400


def _explore(shape: str, seeds: range) -> None:
    allowed, _why = KNOWN_DEFECTS.get(shape, (set(), ""))
    failures = []
    for seed in seeds:
        result = run_one(shape, seed)
        new = [v for v in result.violations if v.rule not in allowed]
        if new:
            failures.append(f"seed {seed} (faults '{fault_spec(result.faults)}'): " + "; ".join(map(str, new)))
    assert not failures, f"{shape}: {len(failures)} schedule(s) broke an invariant:\n" + "\n".join(failures)


@pytest.mark.parametrize("shape", RANDOM_SHAPES)
def test_gate(shape):
    _explore(shape, range(1, 1 + GATE_SCHEDULES))


@pytest.mark.full
@pytest.mark.parametrize("shape", RANDOM_SHAPES)
def test_full_profile(shape):
    _explore(shape, range(100_000, 100_000 + FULL_SCHEDULES))


def _known(why: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=why)


@pytest.mark.parametrize("name", [pytest.param(name, marks=_known(why))
                                  for name, (_b, _rules, why) in directed.DIRECTED.items()])
def test_directed_schedule_keeps_the_guarantee(name):
    results = [run_one("directed:" + name, seed) for seed in range(1, 9)]
    broken = [f"seed {r.seed}: " + "; ".join(map(str, r.violations)) for r in results if r.violations]
    assert not broken, "\n".join(broken)


def test_a_schedule_replays_step_for_step():
    first = next(r for r in (run_one("stream", seed) for seed in range(1, 50)) if len(r.faults) >= 2)
    again = run_one("stream", first.seed)
    assert again.trace == first.trace
    replayed = run_one("stream", first.seed, list(first.faults))  # the recorded faults, no random ones
    assert replayed.trace == first.trace


# -- planted defects: the invariants must see them ----------------------------

def test_a_commit_without_a_durable_decision_is_seen(monkeypatch):
    undurable_decisions(monkeypatch)
    assert "commit-without-decision" in run_one("stream", 1, []).rules


def test_a_decision_log_that_forgets_shows_as_duplicates(monkeypatch):
    forgetful_log(monkeypatch)
    crash = [Fault("q.r0", "fault:driver-after-first-commit", 1, CRASH)]
    rules = set().union(*(run_one("stream", seed, crash).rules for seed in range(1, 6)))
    assert "duplicate" in rules


def test_a_committer_that_never_sweeps_leaves_transactions_open(monkeypatch):
    sweepless_committer(monkeypatch)
    lost_task = [Fault("q.r0.b0.s0.p0.a0", "fault:task-after-precommit", 1, CRASH)]
    rules = set().union(*(run_one("stream", seed, lost_task).rules for seed in range(1, 6)))
    assert "left-open" in rules


def test_the_adapters_stand_in_for_the_products_clients():
    import kafka_eos_ds.kafka.coordinator as real

    for name in ("end_txn", "fence", "describe", "describe_many", "list_transactions", "send_offsets",
                 "commit_offsets", "group_offsets"):
        assert hasattr(real.TransactionCoordinator, name), f"the product's coordinator has no {name} any more"
        assert hasattr(adapters.ModelTransactionCoordinator, name)
