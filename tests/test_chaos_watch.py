"""The chaos harness's watch of the output topic outlives a broker bounce."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_eos_tools.demo.chaos import high_watermark


class _Watcher:
    """Answers watermark requests from a list: an error code or a high watermark."""

    def __init__(self, answers: list[int | str]) -> None:
        self.answers = answers

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            raise KafkaException(KafkaError(getattr(KafkaError, answer)))
        return 0, answer


PARTS = [TopicPartition("out", 0), TopicPartition("out", 1)]


def test_the_high_watermarks_are_summed() -> None:
    assert high_watermark(_Watcher([3, 4]), PARTS) == 7  # type: ignore[arg-type]


@pytest.mark.parametrize("code", ["NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "_TRANSPORT"])
def test_a_leader_moving_after_a_bounce_is_asked_again_not_a_failed_run(code: str) -> None:
    watcher = _Watcher([3, code, 3, 5])
    assert high_watermark(watcher, PARTS) is None  # type: ignore[arg-type]
    assert high_watermark(watcher, PARTS) == 8  # type: ignore[arg-type]


def test_any_other_error_still_fails_the_run() -> None:
    with pytest.raises(KafkaException):
        high_watermark(_Watcher(["TOPIC_AUTHORIZATION_FAILED"]), PARTS)  # type: ignore[arg-type]
