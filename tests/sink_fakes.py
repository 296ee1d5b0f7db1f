"""The Kafka sink's runtime on fakes, for the unit tests of its driver steps."""

from __future__ import annotations

from typing import Any, Callable

from kafka_eos_ds.kafka.driver_session import ClientSessions
from kafka_eos_ds.kafka_sink.runtime import KafkaRuntime


class FixedTopics:
    """A metadata client whose every read of the cluster's topics answers ``answer`` (a
    callable: what it returns, or raises)."""

    def __init__(self, answer: Any) -> None:
        self._answer = answer

    def topics(self, timeout_s: float) -> Any:
        return self._answer() if callable(self._answer) else self._answer

    def close(self) -> None:
        pass


def kafka_runtime(coordinator: Callable[..., Any], decision_log: Callable[..., Any], topics: Any = None,
                  **more: Any) -> KafkaRuntime:
    """A runtime whose coordinator client is ``coordinator(conf, clock=, sleep=)``, whose
    steps' commit logs are ``decision_log(conf, topic, prefix, writer, clients, ...)`` and
    whose reads of the cluster's topics answer ``topics`` (:class:`FixedTopics`); the
    driver clients it keeps are its own (none from an earlier test)."""
    more.setdefault("metadata_client", lambda conf: FixedTopics(topics))
    return KafkaRuntime("test", coordinator=coordinator, decision_log=decision_log, sessions=ClientSessions(),
                        **more)
