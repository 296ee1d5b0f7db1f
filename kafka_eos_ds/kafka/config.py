"""Kafka client settings: secrets kept out of text, librdkafka keys mapped to kafka-python.

Users pass librdkafka settings (``kafka.*`` options). The confluent-kafka clients take
them as they are; the kafka-python admin client (used for the transaction coordinator
calls confluent-kafka lacks) needs the security settings translated, which happens here
and only here.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError

_SECRET_MARKERS = ("password", "secret", "jaas", "token", "ssl.key", "keystore", "credential",
                   "sasl.oauthbearer.config")


def is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe for logs and error messages."""
    return {k: ("[redacted]" if is_secret(k) else v) for k, v in conf.items()}


# librdkafka prints its log lines to stderr unless its client is given a Python logger;
# every confluent-kafka client the project builds gets this one, so applications (and the
# demo, whose progress bar is on stderr) decide where the lines go.
LIBRDKAFKA_LOGGER = logging.getLogger("kafka_eos_ds.librdkafka")


def logged(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with librdkafka's log lines routed to :data:`LIBRDKAFKA_LOGGER`."""
    return {**conf, "logger": LIBRDKAFKA_LOGGER}


# A client that lives for one task or one commit connects to a broker it learned from
# metadata only after librdkafka's reconnect backoff (100 ms by default), on every start
# (docs/decisions.md, "Task producer start").
_SHORT_LIVED = {"reconnect.backoff.ms": 10}


def short_lived(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` for a short-lived librdkafka client: the defaults above, a user value wins."""
    return {**_SHORT_LIVED, **conf}


# librdkafka key -> kafka-python keyword. Keys not listed are client-specific tuning
# and are not needed for the few coordinator calls made with kafka-python.
_TO_KAFKA_PYTHON = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "request.timeout.ms": "request_timeout_ms",
}


def to_kafka_python(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a librdkafka config into kafka-python keyword arguments."""
    out: dict[str, Any] = {}
    for key, value in conf.items():
        target = _TO_KAFKA_PYTHON.get(key.lower())
        if target is None:
            continue
        if target == "security_protocol":
            value = str(value).upper()
        if target == "sasl_mechanism":
            value = str(value).upper()
        if target == "request_timeout_ms":
            value = int(value)
        out[target] = value
    if "ssl.endpoint.identification.algorithm" in {k.lower() for k in conf}:
        algo = str({k.lower(): v for k, v in conf.items()}["ssl.endpoint.identification.algorithm"]).lower()
        out["ssl_check_hostname"] = algo == "https"
    if "bootstrap_servers" not in out:
        raise ConfigError("Option 'kafka.bootstrap.servers' is required.")
    return out
