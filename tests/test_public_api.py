from __future__ import annotations

import kafka_eos_ds
from kafka_eos_ds import errors


def test_public_names_are_pinned():
    assert sorted(kafka_eos_ds.__all__) == sorted([
        "FORMAT", "register", "__version__",
        "KafkaEosError", "ConfigError", "BrokerError", "KafkaClientError", "TransactionError",
        "TransactionFencedError", "TransactionLostError", "DataLossError",
    ])


def test_one_exception_tree():
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.KafkaEosError)
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.TransactionLostError, errors.TransactionError)
    assert issubclass(errors.TransactionError, errors.KafkaClientError)


def test_shim_exposes_the_data_source_under_the_format_name():
    import pyspark_kafka_eos

    assert pyspark_kafka_eos.DefaultSource.name() == kafka_eos_ds.FORMAT == "kafka_eos"
