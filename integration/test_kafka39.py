"""The sink and source against the Kafka 3.9 line (the other suites run on 4.x, where
transaction protocol v2 is finalized): the same tests, with the ``kafka`` fixture
pointing at an embedded Kafka 3.9 broker for this module only."""

from __future__ import annotations

import pytest

from integration.test_sink import test_batch_write_with_all_columns, test_streaming_write_commits_each_batch
from integration import test_sink_crash as crash
from integration.test_sink_crash import (
    pipeline,
    test_3_driver_dies_after_committing_some_transactions,
    test_9_zombie_writers_are_fenced_and_never_visible,
)
from integration.test_source import test_restart_resumes_at_next_offset_and_group_follows


@pytest.fixture
def kafka(kafka39):
    assert kafka39.cluster.kafka_version.startswith("3.9")
    return kafka39


@pytest.mark.full  # CI runs crash points 3 and 9 on 3.9; the full profile point 5 too
def test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline):  # noqa: F811
    crash.test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline)


__all__ = [
    "pipeline",
    "test_batch_write_with_all_columns",
    "test_streaming_write_commits_each_batch",
    "test_3_driver_dies_after_committing_some_transactions",
    "test_5_commit_raises_and_abort_leaves_the_decided_batch_alone",
    "test_9_zombie_writers_are_fenced_and_never_visible",
    "test_restart_resumes_at_next_offset_and_group_follows",
]
