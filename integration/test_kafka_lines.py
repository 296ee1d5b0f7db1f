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

# Two more brokers of their own: the second lane (scripts/test.sh), beside the secured ones.
pytestmark = pytest.mark.second_lane


@pytest.fixture
def kafka(request):
    """The embedded broker of the line a test names (``on_line``)."""
    under_test = request.getfixturevalue(f"kafka{request.param.replace('.', '')}")
    assert under_test.cluster.kafka_version.startswith(request.param)
    return under_test


def on_line(*lines: str):
    """Run a test on these Kafka lines. Each suite runs on the line where it can differ: the
    transaction protocol's steps (commit, abort, fencing a zombie, the group's offsets in a
    transaction) on 3.9, where v1 is the protocol; the write paths on the newest, 4.4. Every
    test on both lines was twice the minutes for no cell more (docs/dev/decisions.md, "The
    full profile runs each variant once")."""
    return pytest.mark.parametrize("kafka", lines, indirect=True)


# Full profile. The gate's Kafka 3.9 and 4.4 cells are the 4.1 and 4.2 lines' crash test
# (scripts/test.sh: the streaming sink and crash point 3 on each broker), so point 3 is not
# repeated here.
@pytest.mark.full
@on_line("4.4")
def test_batch_write_with_all_columns(spark, kafka, new_topic):
    test_sink.test_batch_write_with_all_columns(spark, kafka, new_topic)


@pytest.mark.full
@on_line("4.4")
def test_streaming_write_commits_each_batch(spark, kafka, new_topic, checkpoint):
    test_sink.test_streaming_write_commits_each_batch(spark, kafka, new_topic, checkpoint)


@pytest.mark.full
@on_line("3.9")
def test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline):  # noqa: F811
    crash.test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline)


@pytest.mark.full
@on_line("3.9", "4.4")  # fencing is where v1 and v2 differ most (v2 bumps the epoch each transaction)
def test_9_zombie_writers_are_fenced_and_never_visible(pipeline):  # noqa: F811
    crash.test_9_zombie_writers_are_fenced_and_never_visible(pipeline)


@pytest.mark.full
@on_line("3.9")
def test_restart_resumes_at_next_offset_and_group_follows(spark, kafka, new_topic, checkpoint):
    test_source.test_restart_resumes_at_next_offset_and_group_follows(spark, kafka, new_topic, checkpoint)
