"""``KAFKA_EOS_LOG_LEVEL``: the package's records at that level on standard error, in every
process that imports it (the driver and the Python workers Spark starts for the sink)."""

from __future__ import annotations

import logging

import pytest

import kafka_eos_ds


@pytest.fixture
def package_logger():
    logger = logging.getLogger("kafka_eos_ds")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


def test_the_level_named_in_the_environment_is_the_packages_with_time_and_process(monkeypatch, package_logger,
                                                                                   capsys):
    package_logger.handlers[:] = []
    monkeypatch.setenv(kafka_eos_ds.LOG_LEVEL_VARIABLE, "debug")
    kafka_eos_ds._log_level_from_environment()
    logging.getLogger("kafka_eos_ds.storage.s3").debug("complete %s", "/t/part-0.parquet")
    assert package_logger.level == logging.DEBUG
    line = capsys.readouterr().err
    assert "kafka_eos_ds.storage.s3 DEBUG complete /t/part-0.parquet" in line and "pid " in line


def test_an_unknown_level_is_named_and_ignored(monkeypatch, package_logger, caplog):
    package_logger.setLevel(logging.NOTSET)
    monkeypatch.setenv(kafka_eos_ds.LOG_LEVEL_VARIABLE, "LOUD")
    with caplog.at_level(logging.WARNING, logger="kafka_eos_ds"):
        kafka_eos_ds._log_level_from_environment()
    assert package_logger.level == logging.NOTSET
    assert "KAFKA_EOS_LOG_LEVEL='LOUD' is not a logging level" in caplog.text
