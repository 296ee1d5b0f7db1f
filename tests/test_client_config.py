from __future__ import annotations

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.config import redact, to_kafka_python


def test_redact_hides_every_secret_and_keeps_the_rest():
    conf = {
        "bootstrap.servers": "h:1",
        "sasl.password": "hunter2",
        "sasl.jaas.config": "x password=hunter2",
        "ssl.key.password": "k",
        "ssl.keystore.password": "k2",
        "sasl.oauthbearer.client.secret": "s",
        "security.protocol": "SASL_SSL",
    }
    safe = redact(conf)
    assert "hunter2" not in repr(safe) and "k2" not in repr(safe)
    assert safe["bootstrap.servers"] == "h:1" and safe["security.protocol"] == "SASL_SSL"


def test_security_settings_reach_the_admin_client():
    out = to_kafka_python({
        "bootstrap.servers": "h:1,h:2",
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "scram-sha-512",
        "sasl.username": "u",
        "sasl.password": "p",
        "ssl.ca.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
        "linger.ms": "5",
    })
    assert out == {
        "bootstrap_servers": "h:1,h:2",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": "/ca.pem",
        "ssl_check_hostname": False,
    }


def test_admin_config_needs_bootstrap():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        to_kafka_python({"security.protocol": "PLAINTEXT"})


def test_an_unsupported_kafka_python_fails_naming_the_fix():
    from kafka_eos_ds.errors import KafkaClientError
    from kafka_eos_ds.kafka.kafka_python import check_version

    check_version("3.0.12")
    for version in ("2.0.2", "3.0.9", "4.0.0"):
        with pytest.raises(KafkaClientError, match=r"pip install 'kafka-python>=3.0.10,<4'"):
            check_version(version)


def test_librdkafka_logs_go_to_python_logging():
    from kafka_eos_ds.kafka.config import LIBRDKAFKA_LOGGER, logged

    conf = logged({"bootstrap.servers": "h:9092"})
    assert conf == {"bootstrap.servers": "h:9092", "logger": LIBRDKAFKA_LOGGER}
    assert LIBRDKAFKA_LOGGER.name == "kafka_eos_ds.librdkafka"
