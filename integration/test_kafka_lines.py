"""The sink and source against the other Kafka lines users run: 3.9 (transaction protocol
v1; the other suites run on 4.1, where v2 is finalized) and the newest release, 4.4. The
same tests, with the ``kafka`` fixture pointing at an embedded broker of each line in turn,
for this module only.

Each test here calls the one it repeats rather than importing it: a mark travels with the
function object, so a re-imported test would take its home module's markers (``matrix``,
``full``) and this module's selection would change with them."""

from __future__ import annotations

import pytest

from integration import test_sink, test_source
from integration import test_sink_crash as crash
from integration.test_sink_crash import pipeline

__all__ = ["pipeline"]


@pytest.fixture(params=["3.9", "4.4"])
def kafka(request):
    """The embedded broker of one line: each test here runs once on each."""
    under_test = request.getfixturevalue(f"kafka{request.param.replace('.', '')}")
    assert under_test.cluster.kafka_version.startswith(request.param)
    return under_test


# Full profile: the gate's Kafka 3.9 and 4.4 cells are the 4.1 and 4.2 lines' crash tests
# (scripts/test.sh), a pipeline through the source and the sink on each broker.
@pytest.mark.full
def test_batch_write_with_all_columns(spark, kafka, new_topic):
    test_sink.test_batch_write_with_all_columns(spark, kafka, new_topic)


# CI's gate runs the streaming sink and crash point 3 on Kafka 3.9 in its pyspark 4.1 lane and on
# Kafka 4.4 in its 4.2 lane (scripts/test.sh sets KAFKA_EOS_KAFKA_VERSION there); the full profile
# runs them here too.
@pytest.mark.full
def test_streaming_write_commits_each_batch(spark, kafka, new_topic, checkpoint):
    test_sink.test_streaming_write_commits_each_batch(spark, kafka, new_topic, checkpoint)


@pytest.mark.full
def test_3_driver_dies_after_committing_some_transactions(pipeline):  # noqa: F811
    crash.test_3_driver_dies_after_committing_some_transactions(pipeline)


@pytest.mark.full
def test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline):  # noqa: F811
    crash.test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline)


@pytest.mark.full
def test_9_zombie_writers_are_fenced_and_never_visible(pipeline):  # noqa: F811
    crash.test_9_zombie_writers_are_fenced_and_never_visible(pipeline)


@pytest.mark.full  # as above
def test_restart_resumes_at_next_offset_and_group_follows(spark, kafka, new_topic, checkpoint):
    test_source.test_restart_resumes_at_next_offset_and_group_follows(spark, kafka, new_topic, checkpoint)
