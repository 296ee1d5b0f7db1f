"""Everything kafka-python: the coordinator client's settings, its TLS and OAuth, and the
one adapter over its private API, with the version it was written for.

The project produces and consumes with confluent-kafka (librdkafka) and reaches for
kafka-python only for the transaction-coordinator calls librdkafka lacks
(:mod:`.coordinator`). That client gets the same connection and security settings as
every other (:func:`to_kafka_python`): TLS as one ``ssl.SSLContext``, OAUTHBEARER as a
token provider doing what librdkafka's OIDC method does.

kafka-python's public admin client has no call that sends an arbitrary request to a
transaction or group coordinator, which EndTxn, InitProducerId, AddOffsetsToTxn and
TxnOffsetCommit need. Its internals do (``_find_coordinator_id``, ``_manager``); they are
used in :class:`CoordinatorChannel` and nowhere else, and only on the kafka-python line
they were checked against.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.settings import connection_settings
from kafka_eos_ds.kafka.tls import pkcs12_key_and_chain

SUPPORTED = ">=3.0.10,<4"
_LOWEST, _BELOW = (3, 0, 10), (4,)


def check_version(version: str) -> None:
    """KafkaClientError naming the fix unless ``version`` is a supported kafka-python."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if not _LOWEST <= parts < _BELOW:
        raise KafkaClientError(
            f"kafka_eos needs kafka-python {SUPPORTED} for its transaction-coordinator calls (it uses that "
            f"line's internal API); installed: {version}. Install it with: pip install 'kafka-python{SUPPORTED}'.")


class CoordinatorChannel:
    """Requests to the coordinator of a transactional id or a group, over a kafka-python
    ``KafkaAdminClient``."""

    def __init__(self, admin: Any) -> None:
        import kafka

        check_version(kafka.__version__)
        self._admin = admin

    def send(self, key: str, request: Any, *, group: bool) -> Any:
        """Send ``request`` to the coordinator of ``key`` and return its response; kafka-python's
        errors are raised as they are (the caller maps them)."""
        admin = self._admin
        kind = self._kind(group)

        async def go() -> Any:
            coord = await admin._find_coordinator_id(key, key_type=kind)
            return await admin._manager.send(request, node_id=coord)

        return admin._manager.run(go)

    def refresh(self) -> None:
        """Read the cluster's brokers again (one metadata request): a client kept from an
        earlier driver step lists transactions on every broker its metadata names."""
        manager = self._admin._manager
        manager.run(manager.cluster.refresh_metadata)

    def forget(self, key: str, *, group: bool) -> None:
        """Drop the cached coordinator of ``key``: after a move the cached node is wrong."""
        from kafka.protocol.metadata import CoordinatorType

        kind = self._kind(group)
        coords = getattr(self._admin._manager.cluster, "_coordinators", None)
        if isinstance(coords, dict):
            coords.pop((kind, key), None)
            coords.pop((CoordinatorType.build_from(kind), key), None)

    def api_version(self, request_class: Any) -> int:
        """The highest version of ``request_class`` the cluster serves (-1: unknown)."""
        try:
            return int(self._admin._manager.broker_version_data.api_version(request_class))
        except Exception:  # an old broker without the API, or no version data yet
            return -1

    @staticmethod
    def _kind(group: bool) -> Any:
        from kafka.protocol.metadata import CoordinatorType

        return CoordinatorType.GROUP if group else CoordinatorType.TRANSACTION


# -- settings -----------------------------------------------------------------------------------

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
        pem = pkcs12_key_and_chain(conf["ssl.keystore.location"], conf.get("ssl.keystore.password"))
        _load_chain(ctx, pem, None, None)
    elif conf.get("ssl.certificate.pem") or conf.get("ssl.key.pem"):
        _load_chain(ctx, conf.get("ssl.certificate.pem") or _read(conf.get("ssl.certificate.location")),
                    conf.get("ssl.key.pem") or _read(conf.get("ssl.key.location")), password)
    elif conf.get("ssl.certificate.location"):
        ctx.load_cert_chain(conf["ssl.certificate.location"], conf.get("ssl.key.location"), password)
    return ctx


def _read(path: str | None) -> str | None:
    if not path:
        return None
    with open(path) as f:
        return f.read()


def _load_chain(ctx: ssl.SSLContext, cert: str | None, key: str | None, password: str | None) -> None:
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


def _oauth_provider(conf: Mapping[str, Any]) -> Any:
    """A kafka-python token provider doing what librdkafka's OIDC method does: the client
    credentials grant against ``sasl.oauthbearer.token.endpoint.url``."""
    if str(conf.get("sasl.oauthbearer.method", "default")).lower() != "oidc":
        raise ConfigError("OAUTHBEARER without 'kafka.sasl.oauthbearer.method=oidc' (unsecured JWTs or an "
                          "application token refresh callback) is not supported by the exactly-once sink's "
                          "coordinator client (kafka-python); use OIDC client credentials (OAuthBearerLoginModule "
                          "with clientId/clientSecret and kafka.sasl.oauthbearer.token.endpoint.url).")
    from kafka.net.sasl.oauth import AbstractTokenProvider

    # Registered, not inherited: importing kafka-python here only, not wherever settings are read.
    AbstractTokenProvider.register(ClientCredentialsTokenProvider)
    return ClientCredentialsTokenProvider(
        str(conf["sasl.oauthbearer.token.endpoint.url"]), str(conf.get("sasl.oauthbearer.client.id", "")),
        str(conf.get("sasl.oauthbearer.client.secret", "")), conf.get("sasl.oauthbearer.scope"),
        conf.get("sasl.oauthbearer.extensions"))


class ClientCredentialsTokenProvider:
    """OIDC client-credentials tokens for the coordinator client (a kafka-python
    ``AbstractTokenProvider``): the request librdkafka's ``sasl.oauthbearer.method=oidc``
    makes, a client credentials grant with HTTP basic authentication; the token is kept
    until shortly before it expires."""

    def __init__(self, url: str, client_id: str, client_secret: str, scope: str | None = None,
                 extensions: str | None = None) -> None:
        self._url, self._scope = url, scope
        self._auth = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self._extensions = dict(p.split("=", 1) for p in (extensions or "").split(",") if "=" in p)
        self._token: str | None = None
        self._expires = 0.0

    def __repr__(self) -> str:
        return f"ClientCredentialsTokenProvider({self._url!r})"

    def token(self) -> str:
        if self._token is None or time.time() > self._expires:
            self._token, lifetime = self._fetch()
            self._expires = time.time() + 0.8 * lifetime
        return self._token

    def extensions(self) -> dict[str, Any]:
        return dict(self._extensions)

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self._scope} if self._scope else {})}
        request = urllib.request.Request(self._url, data=urllib.parse.urlencode(form).encode(),
                                         headers={"Authorization": f"Basic {self._auth}",
                                                  "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                body: Any = json.load(response)
        except Exception as exc:
            raise KafkaClientError(f"authentication failed: the OIDC token request to {self._url} failed "
                                   f"({type(exc).__name__}); check the clientId/clientSecret in "
                                   "kafka.sasl.jaas.config and kafka.sasl.oauthbearer.token.endpoint.url") from None
        return str(body["access_token"]), float(body.get("expires_in", 300))
