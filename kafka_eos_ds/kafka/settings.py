"""The settings every confluent-kafka client of the project is built with.

Users pass client settings as ``kafka.*`` options, in librdkafka's or the Java client's
spelling (:mod:`.java_settings` translates the latter). Every confluent-kafka client the
project builds — source readers and metadata clients, task producers, the sink's
metadata client, the commit-log producer and consumer, the CLI and the audit — gets its
settings from :func:`client_config`, so no client drops a security setting; the
kafka-python coordinator client gets the same ones through
:func:`~kafka_eos_ds.kafka.kafka_python.to_kafka_python`. :func:`check_settings` lets
librdkafka itself judge the user's settings on the driver, before anything is written.
Secrets never leave this module readable: :class:`ClientParams` and :func:`redact` hide
them when printed.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError

__all__ = ["ClientParams", "LIBRDKAFKA_LOGGER", "check_settings", "client_config", "connection_settings",
           "hide_values", "is_secret", "logged", "redact"]

_SECRET_MARKERS = ("password", "secret", "jaas", "token", "ssl.key", "ssl_key", "keystore", "credential",
                   "private", "sasl.oauthbearer.config", "sasl_oauth")


def is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe for logs and error messages."""
    return {k: ("[redacted]" if is_secret(k) else v) for k, v in conf.items()}


def hide_values(text: str, conf: Mapping[str, Any]) -> str:
    """``text`` (a client's error message) with the values of ``conf``'s secrets hidden."""
    for key, value in conf.items():
        if is_secret(key) and value and str(value) in text:
            text = text.replace(str(value), "[redacted]")
    return text


class ClientParams(dict[str, Any]):
    """Client settings (a plain dict) whose repr and str hide the secrets, so the options
    objects holding them can be printed and logged."""

    def __repr__(self) -> str:
        return repr(redact(self))

    __str__ = __repr__


# librdkafka prints its log lines to stderr unless its client is given a Python logger;
# every confluent-kafka client the project builds gets this one, so applications (and the
# demo, whose progress bar is on stderr) decide where the lines go.
LIBRDKAFKA_LOGGER = logging.getLogger("kafka_eos_ds.librdkafka")


def logged(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with librdkafka's log lines routed to :data:`LIBRDKAFKA_LOGGER`."""
    return {**conf, "logger": LIBRDKAFKA_LOGGER}


# A client that lives for one task or one commit connects to a broker it learned from
# metadata only after librdkafka's reconnect backoff (100 ms by default), on every start
# (docs/dev/decisions.md, "Task producer start").
_SHORT_LIVED = {"reconnect.backoff.ms": 10}

# Defaults per role; a user value wins over these.
_ROLE_DEFAULTS: dict[str, dict[str, Any]] = {
    # Java's partitioner for keyed records (murmur2 of the key bytes), so a key lands in
    # the partition Spark's built-in sink puts it in; unkeyed records are spread at random.
    # The Java producer's record size limit (max.request.size, 1 MiB) instead of
    # librdkafka's 1,000,000 bytes, so every record the built-in sink writes is accepted.
    "task_producer": {**_SHORT_LIVED, "partitioner": "murmur2_random", "message.max.bytes": 1_048_576},
    "sink_metadata": dict(_SHORT_LIVED),
    "commit_log": dict(_SHORT_LIVED),
}


# Clients that serve the project (metadata, commit log, coordinator, tools) rather than
# carry the user's records get only the settings about reaching and authenticating to the
# cluster: the user's producer or consumer tuning would be refused or warned about by a
# client of the other kind.
_CONNECTION_KEYS = frozenset({
    "bootstrap.servers", "metadata.broker.list", "security.protocol", "client.id", "client.rack",
    "client.dns.lookup", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms",
    "retry.backoff.max.ms", "metadata.max.age.ms", "topic.metadata.refresh.interval.ms", "api.version.request",
    "api.version.request.timeout.ms", "api.version.fallback.ms", "broker.version.fallback",
    "connections.max.idle.ms", "debug", "log_level", "log.connection.close", "enable.ssl.certificate.verification",
    "enable.sasl.oauthbearer.unsecure.jwt", "message.max.bytes", "receive.message.max.bytes",
})
_CONNECTION_PREFIXES = ("ssl.", "ssl_", "sasl.", "socket.", "broker.", "https.")
_RECORD_ROLES = frozenset({"task_producer", "source_reader"})


def connection_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``params`` about reaching and authenticating to the cluster."""
    return {k: v for k, v in params.items()
            if k.lower() in _CONNECTION_KEYS or k.lower().startswith(_CONNECTION_PREFIXES)}


def _errors_reach_the_calls(err: Any) -> None:
    """The error callback of a client whose failures its calls report: librdkafka's error
    events (a broker restarting, a connection refused) need nothing of the project and are
    dropped. A client whose failed calls should name the authentication or TLS error
    behind them passes an :class:`~kafka_eos_ds.kafka.errors.AuthWatch` as ``error_cb``."""


def client_config(params: Mapping[str, Any], role: str, **fixed: Any) -> dict[str, Any]:
    """The settings of one confluent-kafka client: the role's defaults, the user's
    ``params`` (already translated; all of them for the clients that carry records, the
    :func:`connection_settings` for the others), then ``fixed`` (what the connector sets
    itself, e.g. the transactional id or the ``error_cb``), with librdkafka's logs routed
    to Python logging."""
    mine = params if role in _RECORD_ROLES else connection_settings(params)
    conf = {**_ROLE_DEFAULTS.get(role, {}), **mine, **fixed}
    conf.setdefault("error_cb", _errors_reach_the_calls)
    return logged(conf)


def check_settings(params: Mapping[str, Any], role: str = "producer") -> None:
    """Raise ConfigError naming the key librdkafka refuses (unknown key, bad value, a file
    that cannot be read). Builds a client without bootstrap servers: nothing connects."""
    from confluent_kafka import Consumer, KafkaException, Producer

    factory = Consumer if role == "consumer" else Producer
    conf = {k: v for k, v in params.items() if k.lower() != "bootstrap.servers"}
    if role == "consumer":
        conf.setdefault("group.id", "kafka-eos-settings-check")
    try:
        _build(factory, conf)
    except (KafkaException, ValueError, TypeError) as exc:
        text = hide_values(str(exc.args[0].str() if isinstance(exc, KafkaException) else exc), params)
        culprit = "'kafka.sasl.mechanism'" if "SASL mechanism" in text else _culprit(factory, conf)
        raise ConfigError(f"Kafka option {culprit} was refused by librdkafka: {text}. Fix or remove it.") from None


def _build(factory: Any, conf: Mapping[str, Any]) -> None:
    client = factory(logged(conf))
    if hasattr(client, "close"):
        client.close()


def _culprit(factory: Any, conf: Mapping[str, Any]) -> str:
    """The user's name of the key librdkafka refused (its message uses its own alias,
    e.g. request.required.acks for acks): the first key refused on its own."""
    base = {k: v for k, v in conf.items() if k == "group.id"}
    for key, value in conf.items():
        try:
            _build(factory, {**base, key: value})
        except Exception:
            return f"'kafka.{key}'"
    return "a kafka.* option (their combination)"
