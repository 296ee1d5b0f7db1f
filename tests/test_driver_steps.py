"""Cheap driver steps: the commit log's readers are kept per driver process (by their full
settings), and every read still asks the offsets and fetches again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka.driver_session import SESSIONS
from kafka_eos_ds.kafka_sink.commit_log import LogClients
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
from kafka_eos_ds.twophase.protocol import DECIDED, Decision


class _Msg:
    def __init__(self, offset: int, key: bytes | None = None, value: bytes | None = None, eof: bool = False):
        self._offset, self._key, self._value, self._eof = offset, key, value, eof

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, 1


class _Topic:
    """One partition's committed records, shared by the fake consumers."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes]] = []
        self.fail_next_read = False


class _Consumer:
    def __init__(self, conf: Any, topic: _Topic, log: list[str]) -> None:
        self.conf, self.topic, self.log = dict(conf), topic, log
        self.queue: list[_Msg] = []
        self.assigned = False
        self.closed = False

    def get_watermark_offsets(self, tp: Any, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        assert not self.closed and cached is False
        self.log.append("ListOffsets")
        return 0, len(self.topic.records)

    def assign(self, partitions: list[Any]) -> None:
        (tp,) = partitions
        if self.topic.fail_next_read:
            self.topic.fail_next_read = False
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        self.log.append("Fetch")
        self.assigned = True
        self.queue = [_Msg(i, k, v) for i, (k, v) in enumerate(self.topic.records) if i >= tp.offset]
        self.queue.append(_Msg(len(self.topic.records), eof=True))

    def unassign(self) -> None:
        self.assigned = False
        self.queue = []

    def poll(self, timeout: float = -1) -> _Msg | None:
        return self.queue.pop(0) if self.queue else None

    def close(self) -> None:
        self.closed = True


class _Clients(LogClients):
    def __init__(self, topic: _Topic, built: list[_Consumer], log: list[str]) -> None:
        self.topic, self.built, self.log = topic, built, log

    def consumer(self, conf: Any) -> Any:
        consumer = _Consumer(conf, self.topic, self.log)
        self.built.append(consumer)
        return consumer


@pytest.fixture
def world():
    SESSIONS.close()
    topic, built, log = _Topic(), [], []
    yield topic, built, log
    SESSIONS.close()


def _log(world: Any, conf: dict[str, Any] | None = None) -> KafkaDecisionLog:
    topic, built, log = world
    decisions = KafkaDecisionLog(conf or {"bootstrap.servers": "b:9092"}, "log", "p",
                                 clients=_Clients(topic, built, log))
    decisions._partitions = 1  # the topic's partition count, as ensure_topic leaves it
    return decisions


def _record(topic: _Topic, batch: int) -> None:
    topic.records.append((b"p|q:app", json.dumps(Decision("app", batch, DECIDED).to_json()).encode()))


def test_the_next_step_reuses_the_process_readers_and_still_reads_the_log_afresh(world):
    topic, built, log = world
    _record(topic, 0)
    first = _log(world)
    assert first.latest("q:app").batch_id == 0
    first.close()
    assert len(built) == 2 and not any(c.closed for c in built)
    assert not any(c.assigned for c in built)  # a kept reader fetches nothing between steps

    _record(topic, 1)  # another driver decided since: the next step must see it
    log.clear()
    second = _log(world)
    assert second.latest("q:app").batch_id == 1
    second.close()
    assert len(built) == 2  # no new client
    assert log.count("ListOffsets") == 2 and log.count("Fetch") == 1  # offsets and records asked again


def test_a_record_keyed_by_the_bare_prefix_is_no_decision_of_this_version(world):
    """Development builds before 0.1.0 keyed a stream's decision by the bare prefix; only keys
    that name the writer are read now, so such a record is no writer's."""
    topic, _, _ = world
    topic.records.append((b"p", json.dumps(Decision("app", 3, DECIDED).to_json()).encode()))
    decisions = _log(world)
    assert decisions.latest("q:app") is None and decisions.latest_of("q") is None
    decisions.close()


def test_readers_are_kept_by_their_full_settings(world):
    _, built, _ = world
    plain = _log(world)
    plain.latest("q:app")
    plain.close()
    secured = _log(world, {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                           "sasl.username": "u", "sasl.password": "secret"})
    secured.latest("q:app")
    secured.close()
    assert len(built) == 4  # other security settings: other clients
    assert built[2].conf["sasl.password"] == "secret"
    assert all("secret" not in repr(key) for key in SESSIONS._kept)  # keys hold a digest


def test_a_failed_read_closes_the_readers_and_the_next_step_builds_new_ones(world):
    topic, built, _ = world
    _record(topic, 0)
    topic.fail_next_read = True
    failing = _log(world)
    with pytest.raises(KafkaClientError):
        failing.latest("q:app")
    failing.close()
    assert len(built) == 2 and all(c.closed for c in built)
    again = _log(world)
    again.latest("q:app")
    again.close()
    assert len(built) == 4 and not any(c.closed for c in built[2:])
