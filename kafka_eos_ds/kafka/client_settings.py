"""The one boundary every Kafka client of the project is built through.

Users pass client settings as ``kafka.*`` options, in librdkafka's or the Java client's
spelling (:mod:`.java_settings` translates the latter). Every client the project builds —
source readers and metadata clients, task producers, the sink's metadata client, the
commit-log producer and consumer, the kafka-python coordinator client, the CLI and the
audit — gets its settings from :func:`client_config` (or, for kafka-python,
:func:`to_kafka_python`), so no client drops a security setting; and every client error
becomes a project error in :func:`client_error`, so an authentication failure never reads
"cannot reach Kafka".
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from typing import Any, Mapping, Optional

from kafka_eos_ds.errors import ConfigError, KafkaClientError, KafkaEosError
from kafka_eos_ds.kafka.java_settings import translate

__all__ = ["ClientParams", "LIBRDKAFKA_LOGGER", "check_settings", "client_config", "client_error", "is_secret",
           "redact", "to_kafka_python", "translate"]

_SECRET_MARKERS = ("password", "secret", "jaas", "token", "ssl.key", "ssl_key", "keystore", "credential",
                   "private", "sasl.oauthbearer.config", "sasl_oauth")


def is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe for logs and error messages."""
    return {k: ("[redacted]" if is_secret(k) else v) for k, v in conf.items()}


class ClientParams(dict):
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
# (docs/decisions.md, "Task producer start").
_SHORT_LIVED = {"reconnect.backoff.ms": 10}


def short_lived(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` for a short-lived librdkafka client: the defaults above, a user value wins."""
    return {**_SHORT_LIVED, **conf}


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


class _AuthWatch:
    """librdkafka's error callback: keeps the last authentication or TLS error, which a
    metadata call itself reports only as a transport failure or a timeout."""

    def __init__(self) -> None:
        self.error: Any = None

    def __call__(self, err: Any) -> None:
        if _auth_kind(err) is not None:
            self.error = err


def client_config(params: Mapping[str, Any], role: str, **fixed: Any) -> dict[str, Any]:
    """The settings of one confluent-kafka client: the role's defaults, the user's
    ``params`` (already translated; all of them for the clients that carry records, the
    :func:`connection_settings` for the others), then ``fixed`` (what the connector sets
    itself, e.g. the transactional id), with librdkafka's logs and errors routed here."""
    mine = params if role in _RECORD_ROLES else connection_settings(params)
    conf = {**_ROLE_DEFAULTS.get(role, {}), **mine, **fixed}
    conf.setdefault("error_cb", _AuthWatch())
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
        text = _hide_values(str(exc.args[0].str() if isinstance(exc, KafkaException) else exc), params)
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


def _hide_values(text: str, params: Mapping[str, Any]) -> str:
    for key, value in params.items():
        if is_secret(key) and value and str(value) in text:
            text = text.replace(str(value), "[redacted]")
    return text


# -- errors --------------------------------------------------------------------------------


def _auth_kind(err: Any) -> Optional[str]:
    """'authentication', 'authorization', 'tls' or None for a confluent KafkaError."""
    from confluent_kafka import KafkaError

    code = err.code() if hasattr(err, "code") else None
    text = err.str() if hasattr(err, "str") else ""
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return "authentication"
    # A failed TLS handshake reaches the error callback as a transport error.
    if code == KafkaError._SSL or (code == KafkaError._TRANSPORT and ("SSL handshake failed" in text
                                                                       or "certificate verify failed" in text)):
        return "tls"
    if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
                KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                KafkaError.DELEGATION_TOKEN_AUTHORIZATION_FAILED):
        return "authorization"
    return None


_FIX = {
    "authentication": "authentication failed: check kafka.sasl.jaas.config (or kafka.sasl.username/password, "
                      "kafka.sasl.mechanism) and kafka.security.protocol",
    "tls": "the TLS handshake failed: check kafka.ssl.truststore.* (or kafka.ssl.ca.location), the client "
           "certificate (kafka.ssl.keystore.*) and kafka.ssl.endpoint.identification.algorithm",
    "authorization": "not authorized: the principal lacks an ACL for this operation (topic, group, "
                     "transactional id or cluster)",
}


def client_error(what: str, exc: BaseException, conf: Optional[Mapping[str, Any]] = None,
                 client: Any = None) -> KafkaEosError:
    """The project error for a failed client call ``what`` (confluent-kafka or kafka-python).

    Authentication, TLS and authorization failures are not retriable and say which
    settings to check; only a broker that does not answer is "cannot reach". ``client``
    (a producer or admin client) is polled once first: librdkafka hands the error that
    explains a failed call to the error callback only when the client is polled."""
    if isinstance(exc, KafkaEosError):
        return exc
    if client is not None and hasattr(client, "poll"):
        try:
            client.poll(0)
        except Exception:  # the explanation is optional; the call's own error stands
            pass
    err = exc.args[0] if exc.args else None
    kind = _auth_kind(err) if err is not None and hasattr(err, "code") else _kafka_python_kind(exc)
    watch = (conf or {}).get("error_cb")
    if kind is None and isinstance(watch, _AuthWatch) and watch.error is not None:
        kind, err = _auth_kind(watch.error), watch.error
    detail = _hide_values(str(err if err is not None else exc), conf or {})
    if kind is not None:
        return KafkaClientError(f"{what}: {_FIX[kind]} ({detail})", retriable=False)
    servers = (conf or {}).get("bootstrap.servers") or (conf or {}).get("bootstrap_servers")
    if err is not None and hasattr(err, "retriable"):
        retriable = bool(err.retriable()) or _unreachable(err)
        if _unreachable(err):
            return KafkaClientError(f"{what}: cannot reach Kafka at {servers} ({detail})", retriable=True)
        return KafkaClientError(f"{what}: {detail}", retriable=retriable)
    if _kafka_python_unreachable(exc):
        return KafkaClientError(f"{what}: cannot reach Kafka at {servers} ({detail})", retriable=True)
    return KafkaClientError(f"{what}: {detail}", retriable=bool(getattr(exc, "retriable", True)))


def _unreachable(err: Any) -> bool:
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
                          KafkaError._RESOLVE)


def _kafka_python_kind(exc: BaseException) -> Optional[str]:
    if isinstance(exc, ssl.SSLError):
        return "tls"
    name = type(exc).__name__
    if "Authentication" in name:
        return "authentication"
    if "Authorization" in name:
        return "authorization"
    return None


def _kafka_python_unreachable(exc: BaseException) -> bool:
    return type(exc).__name__ in ("NoBrokersAvailable", "KafkaConnectionError", "KafkaTimeoutError") or \
        isinstance(exc, OSError)


# -- kafka-python -----------------------------------------------------------------------------

# librdkafka key -> kafka-python keyword, for settings kafka-python takes as they are.
_TO_KAFKA_PYTHON = {
    "bootstrap.servers": "bootstrap_servers",
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "request.timeout.ms": "request_timeout_ms",
}

# Settings kafka-python cannot express, with the reason given to the user.
_NOT_FOR_KAFKA_PYTHON = {
    "sasl.kerberos.keytab": "the exactly-once sink's coordinator client (kafka-python) uses the Kerberos ticket "
                            "cache; run kinit with the keytab on the driver and remove this option",
    "ssl.engine.location": "the coordinator client (kafka-python) cannot load OpenSSL engines",
    "ssl.providers": "the coordinator client (kafka-python) cannot load OpenSSL providers",
    "ssl.certificate.store": "the coordinator client (kafka-python) cannot read the Windows certificate store",
}


def to_kafka_python(conf: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python keyword arguments with every connection and security setting of
    ``conf`` (librdkafka's keys, already translated); ConfigError for what kafka-python
    cannot express. TLS settings become one ``ssl_context``; certificates and keys given
    inline or in a PKCS#12 file pass through a 0600 temporary file that is deleted as soon
    as the context has loaded it."""
    lower = {k.lower(): v for k, v in connection_settings(conf).items()}
    out: dict[str, Any] = {}
    for key, value in lower.items():
        if key in _NOT_FOR_KAFKA_PYTHON:
            raise ConfigError(f"Kafka option 'kafka.{key}': {_NOT_FOR_KAFKA_PYTHON[key]}.")
        target = _TO_KAFKA_PYTHON.get(key)
        if target is None:
            continue
        if target in ("security_protocol", "sasl_mechanism"):
            value = str(value).strip().upper()
        if target == "request_timeout_ms":
            value = int(value)
        out[target] = value
    if "bootstrap_servers" not in out:
        raise ConfigError("Option 'kafka.bootstrap.servers' is required.")
    if out.get("sasl_mechanism") == "OAUTHBEARER":
        out["sasl_oauth_token_provider"] = _oauth_provider(lower)
    if str(out.get("security_protocol", "PLAINTEXT")).endswith("SSL"):
        try:
            out["ssl_context"] = _ssl_context(lower)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"The TLS settings (kafka.ssl.*) could not be loaded for the transaction-coordinator "
                              f"client: {type(exc).__name__}: {exc.strerror or exc}. Check the files and "
                              "passwords they name.") from None
        out["ssl_check_hostname"] = out["ssl_context"].check_hostname
    return out


def _ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not conf.get("ssl.ca.location") and not conf.get("ssl.ca.pem"):
        ctx.load_default_certs()  # as librdkafka: the system's CAs unless one is given
    if conf.get("ssl.ca.location"):
        ctx.load_verify_locations(cafile=conf["ssl.ca.location"])
    if conf.get("ssl.ca.pem"):
        ctx.load_verify_locations(cadata=conf["ssl.ca.pem"])
    if conf.get("ssl.crl.location"):
        ctx.load_verify_locations(cafile=conf["ssl.crl.location"])
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    algorithm = str(conf.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
    verify = str(conf.get("enable.ssl.certificate.verification", "true")).strip().lower() not in ("false", "0")
    ctx.check_hostname = verify and algorithm == "https"
    if not verify:
        ctx.verify_mode = ssl.CERT_NONE
    password = conf.get("ssl.key.password")
    if conf.get("ssl.keystore.location"):
        pem, _ = _pkcs12_pem(conf["ssl.keystore.location"], conf.get("ssl.keystore.password"))
        _load_chain(ctx, pem, None, None)
    elif conf.get("ssl.certificate.pem") or conf.get("ssl.key.pem"):
        _load_chain(ctx, conf.get("ssl.certificate.pem") or _read(conf.get("ssl.certificate.location")),
                    conf.get("ssl.key.pem") or _read(conf.get("ssl.key.location")), password)
    elif conf.get("ssl.certificate.location"):
        ctx.load_cert_chain(conf["ssl.certificate.location"], conf.get("ssl.key.location"), password)
    return ctx


def _read(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    with open(path) as f:
        return f.read()


def _load_chain(ctx: ssl.SSLContext, cert: Optional[str], key: Optional[str], password: Optional[str]) -> None:
    if not cert or (not key and "PRIVATE KEY-----" not in cert):
        raise ConfigError("A client certificate needs both its certificate and its key (kafka.ssl.keystore.key "
                          "and kafka.ssl.keystore.certificate.chain, or ssl.key.pem and ssl.certificate.pem).")
    fd, path = tempfile.mkstemp(prefix="kafka-eos-client-", suffix=".pem")  # created 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cert if cert.endswith("\n") else cert + "\n")
            f.write(key or "")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _pkcs12_pem(location: str, password: Optional[str]) -> tuple[str, str]:
    from kafka_eos_ds.kafka.java_settings import pkcs12_to_pem

    pem = pkcs12_to_pem(location, password, "kafka.ssl.keystore", keys=True)
    if "PRIVATE KEY-----" not in pem:
        raise ConfigError(f"Kafka option 'kafka.ssl.keystore.location': {location!r} holds no private key.")
    return pem, ""


def _oauth_provider(conf: Mapping[str, Any]) -> Any:
    """A kafka-python token provider doing what librdkafka's OIDC method does: the client
    credentials grant against ``sasl.oauthbearer.token.endpoint.url``."""
    if str(conf.get("sasl.oauthbearer.method", "default")).lower() != "oidc":
        raise ConfigError("OAUTHBEARER without 'kafka.sasl.oauthbearer.method=oidc' (unsecured JWTs or an "
                          "application token refresh callback) is not supported by the exactly-once sink's "
                          "coordinator client (kafka-python); use OIDC client credentials (OAuthBearerLoginModule "
                          "with clientId/clientSecret and kafka.sasl.oauthbearer.token.endpoint.url).")
    from kafka_eos_ds.kafka.oidc import ClientCredentialsTokenProvider

    return ClientCredentialsTokenProvider(
        str(conf["sasl.oauthbearer.token.endpoint.url"]), str(conf.get("sasl.oauthbearer.client.id", "")),
        str(conf.get("sasl.oauthbearer.client.secret", "")), conf.get("sasl.oauthbearer.scope"),
        conf.get("sasl.oauthbearer.extensions"))
