"""``kafka_eos_ds.register`` on every pyspark line: 4.0 and 4.1 refuse to re-register a
name Spark already discovered from the installed shim, which means the format is known."""

from __future__ import annotations

import pytest

import kafka_eos_ds


class _SparkError(Exception):
    def __init__(self, condition: str) -> None:
        super().__init__(condition)
        self.condition = condition

    def getCondition(self) -> str:
        return self.condition


class _Session:
    def __init__(self, condition=None) -> None:
        self.condition = condition
        self.registered: list = []
        self.dataSource = self

    def register(self, source) -> None:
        if self.condition:
            raise _SparkError(self.condition)
        self.registered.append(source.name())


def test_registers_both_formats():
    session = _Session()
    kafka_eos_ds.register(session)
    assert session.registered == ["kafka_eos", "kafka_eos_file"]


def test_a_source_spark_discovered_already_counts_as_registered():
    kafka_eos_ds.register(_Session("DATA_SOURCE_ALREADY_EXISTS"))


def test_other_registration_errors_are_raised():
    with pytest.raises(_SparkError, match="DATA_SOURCE_NOT_FOUND"):
        kafka_eos_ds.register(_Session("DATA_SOURCE_NOT_FOUND"))
