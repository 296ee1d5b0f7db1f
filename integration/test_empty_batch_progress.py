"""A micro-batch without output, with ``sourceGroupId``, against a real broker: its source
offsets commit inside the transaction of its ``done`` record (the decision writer's), so a
driver whose writer was fenced since cannot move the group back; a new query takes over
only when the group is at or past the output's end on every partition."""

from __future__ import annotations

import pytest

from integration.test_decisions import _retried, _sink
from kafka_eos_ds.errors import KafkaClientError, TransactionError
from kafka_eos_ds.twophase import DONE, Decision, Kind, WriteId
from kafka_eos_tools.topics import unique_name


def test_an_empty_batchs_offsets_ride_in_its_done_record_and_a_fenced_driver_cannot_move_them_back(kafka, new_topic):
    group, source = unique_name("group"), new_topic(2, prefix="in")
    sink = _sink(kafka, new_topic(1, prefix="out"), sourceGroupId=group)
    zombie = sink.log()
    zombie.fence_writers()  # a driver step that started, then stalled
    batch3 = {"group": group, "offsets": {source: {"0": 5, "1": 7}}}
    write = WriteId(Kind.STREAM, "q", 3)
    with sink.driver._committer(write) as committer:  # its replacement: fences the zombie's writer
        _retried(lambda: committer.commit(write, [], batch3))
        held = committer.participants.coordinator.group_offsets(group, batch3["offsets"])
    assert held == {source: {"0": 5, "1": 7}}
    assert sink.log().latest("q:q") == Decision("q", 3, DONE, (), batch3)
    # The zombie comes back with an older batch without output: neither its record nor its
    # offsets land.
    batch2 = {"group": group, "offsets": {source: {"0": 1, "1": 1}}}
    with pytest.raises(KafkaClientError):
        zombie.write("q:q", Decision("q", 2, DONE, (), batch2))
    with sink.driver._committer(write) as committer:
        assert committer.participants.coordinator.group_offsets(group, batch3["offsets"]) == held
        # A group moved back on one partition (by hand, here): a new query refuses to take over.
        committer.participants.coordinator.commit_offsets(group, {source: {"1": 6}})
    new_query = WriteId(Kind.STREAM, "new-query", -1)
    with sink.driver._committer(new_query) as committer, \
            pytest.raises(TransactionError, match="cannot start where its output ends") as refused:
        committer.recover(new_query)
    assert f"holds offsets before them ({source}-1: 6)" in str(refused.value)


def test_the_groups_offsets_read_right_after_each_commit_are_that_commits(kafka, new_topic):
    """A transaction's offsets reach the group a moment after its commit returns (the
    marker); a read in between once answered the offsets from before it (a CI run read
    ``{}``). Read with require_stable, every read right after a commit sees it."""
    group, source = unique_name("group"), new_topic(2, prefix="in")
    sink = _sink(kafka, new_topic(1, prefix="out"), sourceGroupId=group)
    seen = []
    for batch in range(12):
        progress = {"group": group, "offsets": {source: {"0": 10 * (batch + 1), "1": 7 * (batch + 1)}}}
        write = WriteId(Kind.STREAM, "q", batch)
        with sink.driver._committer(write) as committer:
            _retried(lambda w=write, p=progress: committer.commit(w, [], p))
            seen.append(committer.participants.coordinator.group_offsets(group, progress["offsets"]))
    assert seen == [{source: {"0": 10 * (b + 1), "1": 7 * (b + 1)}} for b in range(12)]
