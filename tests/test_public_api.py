from __future__ import annotations

import kafka_eos_ds
from kafka_eos_ds import errors


def test_public_names_are_pinned():
    assert sorted(kafka_eos_ds.__all__) == sorted([
        "FORMAT", "register", "__version__",
        "KafkaEosError", "ConfigError", "KafkaClientError", "TransactionError",
        "TransactionFencedError", "TransactionLostError", "DataLossError",
    ])


def test_one_exception_tree():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.KafkaEosError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.TransactionLostError, errors.TransactionError)
    # The two-phase-commit errors belong to no particular sink (docs/dev/decisions.md).
    assert not issubclass(errors.TransactionError, errors.KafkaClientError)


def test_retriable_is_a_property_of_every_error():
    assert errors.KafkaEosError("x").retriable is False
    assert errors.TransactionError("x", retriable=True).retriable is True
    assert errors.KafkaClientError("x", retriable=True).retriable is True


def test_shim_exposes_the_data_source_under_the_format_name():
    import pyspark_kafka_eos

    assert pyspark_kafka_eos.DefaultSource.name() == kafka_eos_ds.FORMAT == "kafka_eos"
