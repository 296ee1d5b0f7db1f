"""Reading a consumer group's offsets after a transaction carrying them committed: the
commit is acknowledged before its marker reaches the group coordinator, and until then a
plain OffsetFetch answers the offsets from before it. ``group_offsets`` asks with
require_stable and waits out UNSTABLE_OFFSET_COMMIT (a CI run read ``{}`` right after a
commit, integration/test_empty_batch_progress.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka.coordinator import TransactionCoordinator

CONF = {"bootstrap.servers": "127.0.0.1:1"}


class GroupChannel:
    """A group coordinator answering OffsetFetch from a script: one answer per request,
    ``{(topic, partition): (error_code, offset)}``; the last answer repeats."""

    def __init__(self, *answers, top=c.NONE):
        self.answers, self.top, self.requests = list(answers), top, []

    def send(self, key, request, *, group):
        assert group and type(request).__name__ == "OffsetFetchRequest"
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return SimpleNamespace(error_code=self.top, topics=[
            SimpleNamespace(name=t.name, partitions=[
                SimpleNamespace(partition_index=p, committed_offset=answer[(t.name, p)][1],
                                error_code=answer[(t.name, p)][0]) for p in t.partition_indexes])
            for t in request.topics])

    def forget(self, key, *, group):
        pass


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def coordinator(channel, clock):
    return TransactionCoordinator(CONF, admin_factory=lambda **settings: SimpleNamespace(close=lambda: None),
                                  channel_factory=lambda client: channel, clock=lambda: clock.now,
                                  sleep=clock.sleep)


def test_the_offsets_are_asked_stable_for_the_partitions_named_and_unset_ones_left_out():
    channel, clock = GroupChannel({("in", 0): (c.NONE, 5), ("in", 1): (c.NONE, -1)}), Clock()
    held = coordinator(channel, clock).group_offsets("g", {"in": {"0": 9, "1": 9}})
    assert held == {"in": {"0": 5}}
    [request] = channel.requests
    assert request.require_stable and request.group_id == "g"
    assert [(t.name, t.partition_indexes) for t in request.topics] == [("in", [0, 1])]
    assert clock.slept == []


def test_a_partition_whose_transactional_offsets_await_their_marker_is_asked_again():
    unstable = {("in", 0): (c.UNSTABLE_OFFSET_COMMIT, -1), ("in", 1): (c.NONE, 3)}
    marked = {("in", 0): (c.NONE, 5), ("in", 1): (c.NONE, 7)}
    channel, clock = GroupChannel(unstable, unstable, marked), Clock()
    assert coordinator(channel, clock).group_offsets("g", {"in": ["0", "1"]}) == {"in": {"0": 5, "1": 7}}
    assert len(channel.requests) == 3 and len(clock.slept) == 2


def test_offsets_that_stay_unstable_fail_retriable_after_the_timeout():
    channel, clock = GroupChannel({("in", 0): (c.UNSTABLE_OFFSET_COMMIT, -1)}), Clock()
    with pytest.raises(KafkaClientError, match="UnstableOffsetCommit") as info:
        coordinator(channel, clock).group_offsets("g", {"in": [0]}, timeout_s=5)
    assert info.value.retriable and 5 <= clock.now < 7


def test_a_refused_fetch_fails_at_once_naming_the_group():
    channel, clock = GroupChannel({("in", 0): (c.GROUP_AUTHORIZATION_FAILED, -1)}), Clock()
    with pytest.raises(KafkaClientError, match="OffsetFetch\\(group 'g'\\)") as info:
        coordinator(channel, clock).group_offsets("g", {"in": [0]})
    assert not info.value.retriable and clock.slept == []
