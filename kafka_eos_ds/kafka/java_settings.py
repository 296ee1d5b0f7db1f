"""The Java Kafka client's settings, as users pass them to Spark's built-in connector,
translated into librdkafka's.

``format("kafka")`` users pass ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location``
and the like. librdkafka knows none of these. :func:`translate` turns each into what
librdkafka has, or refuses it (ConfigError naming the key and the fix), on the driver,
while the options are read, before anything is written (docs/dev/decisions.md, "Java client
settings").
"""

from __future__ import annotations

import re
from typing import Mapping

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.tls import pkcs12_certificates

# Java key -> librdkafka key with the same meaning and unit.
_RENAMED = {
    "sasl.mechanism": "sasl.mechanisms",
    "max.request.size": "message.max.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "delivery.timeout.ms": "message.timeout.ms",
}

# Java-only keys: the reason, and what to use instead where librdkafka has something.
_REFUSED = {
    "buffer.memory": "use 'kafka.queue.buffering.max.kbytes' (kilobytes) instead.",
    "max.block.ms": "librdkafka does not block on metadata; remove it.",
    "default.api.timeout.ms": "remove it; the source option 'kafkaConsumer.pollTimeoutMs' bounds reads.",
    "max.poll.records": "remove it; the source option 'arrowBatchRecords' sizes what a task reads at once.",
    "ssl.protocol": "remove it; librdkafka negotiates TLS 1.2 or 1.3 (OpenSSL's defaults).",
    "ssl.enabled.protocols": "remove it; librdkafka negotiates TLS 1.2 or 1.3 (OpenSSL's defaults).",
    "ssl.provider": "remove it; librdkafka uses OpenSSL.",
    "ssl.keymanager.algorithm": "remove it; librdkafka uses OpenSSL.",
    "ssl.trustmanager.algorithm": "remove it; librdkafka uses OpenSSL.",
    "ssl.secure.random.implementation": "remove it; librdkafka uses OpenSSL.",
    "security.providers": "remove it; librdkafka uses OpenSSL.",
    "sasl.client.callback.handler.class": "Java classes cannot be loaded by librdkafka.",
    "sasl.login.class": "Java classes cannot be loaded by librdkafka.",
    "sasl.login.connect.timeout.ms": "librdkafka has no equivalent; remove it.",
    "sasl.login.read.timeout.ms": "librdkafka has no equivalent; remove it.",
    "sasl.login.retry.backoff.ms": "librdkafka has no equivalent; remove it.",
    "sasl.login.retry.backoff.max.ms": "librdkafka has no equivalent; remove it.",
    "sasl.login.refresh.window.factor": "librdkafka refreshes tokens at 80% of their life; remove it.",
    "sasl.login.refresh.window.jitter": "librdkafka has no equivalent; remove it.",
    "sasl.login.refresh.min.period.seconds": "librdkafka has no equivalent; remove it.",
    "sasl.login.refresh.buffer.seconds": "librdkafka has no equivalent; remove it.",
    "sasl.oauthbearer.scope.claim.name": "librdkafka does not validate tokens locally; remove it.",
    "sasl.oauthbearer.sub.claim.name": "librdkafka does not validate tokens locally; remove it.",
    "sasl.oauthbearer.jwks.endpoint.url": "a broker setting; remove it.",
    "sasl.oauthbearer.expected.audience": "a broker setting; remove it.",
    "sasl.oauthbearer.expected.issuer": "a broker setting; remove it.",
    "java.security.auth.login.config": "a JAAS file is not read; put its KafkaClient entry into "
                                       "'kafka.sasl.jaas.config' instead.",
}

_REFUSED_PREFIXES = {
    "spark.kafka.clusters.": "Spark's delegation tokens are obtained by the JVM connector only; pass "
                             "credentials with 'kafka.sasl.jaas.config' (or librdkafka's sasl.* keys).",
}

_OIDC_HANDLER = "OAuthBearerLoginCallbackHandler"

_JKS_FIX = ("librdkafka cannot read Java keystores (JKS). Convert it once, e.g. keytool -importkeystore "
            "-srckeystore store.jks -srcstoretype JKS -destkeystore store.p12 -deststoretype PKCS12, and "
            "point the option at store.p12 (with type PKCS12).")


def translate(params: Mapping[str, str]) -> dict[str, str]:
    """``params`` (``kafka.*`` options without the prefix) with every Java client setting
    replaced by librdkafka's; ConfigError naming any that cannot be."""
    out: dict[str, str] = {}
    java: dict[str, str] = {}
    for key, value in params.items():
        lowered = key.lower()
        for prefix, why in _REFUSED_PREFIXES.items():
            if lowered.startswith(prefix):
                raise ConfigError(f"Kafka option 'kafka.{key}' is not supported: {why}")
        if lowered in _REFUSED:
            raise ConfigError(f"Kafka option 'kafka.{key}' is a Java client setting: {_REFUSED[lowered]}")
        if (lowered.startswith("ssl.truststore.") or lowered.startswith("ssl.keystore.")
                or lowered in ("sasl.jaas.config", "sasl.login.callback.handler.class")):
            java[lowered] = value
            continue
        if lowered in _RENAMED:
            _put(out, _RENAMED[lowered], value, key)
            continue
        _put(out, key, value, key)
    _mechanism(out)
    if "sasl.jaas.config" in java:
        _jaas(out, java.pop("sasl.jaas.config"), java.pop("sasl.login.callback.handler.class", None))
    elif "sasl.login.callback.handler.class" in java:
        raise ConfigError("Kafka option 'kafka.sasl.login.callback.handler.class' needs 'kafka.sasl.jaas.config' "
                          "with the OAuthBearerLoginModule; Java classes cannot be loaded by librdkafka.")
    _truststore(out, java)
    _keystore(out, java)
    for left in java:  # anything ssl.truststore.* / ssl.keystore.* not consumed above
        raise ConfigError(f"Kafka option 'kafka.{left}' is not supported (librdkafka has no equivalent).")
    _endpoint_identification(out)
    return out


def _put(out: dict[str, str], key: str, value: str, given: str) -> None:
    existing = {k.lower(): k for k in out}.get(key.lower())
    if existing is not None and out[existing] != value:
        raise ConfigError(f"Kafka option 'kafka.{given}' conflicts with another option setting '{key}' "
                          "differently; keep one of them.")
    out[existing or key] = value


def _pop(out: dict[str, str], key: str) -> str | None:
    for k in list(out):
        if k.lower() == key:
            return out.pop(k)
    return None


def _mechanism(out: dict[str, str]) -> None:
    # Java spells it sasl.mechanism, librdkafka sasl.mechanisms (it also takes the
    # singular as an alias); both upper-case the names (scram-sha-512 -> SCRAM-SHA-512).
    mechanism = _pop(out, "sasl.mechanisms")
    if mechanism is not None:
        mechanism = mechanism.strip().upper()
        if mechanism == "AWS_MSK_IAM":
            raise ConfigError("Kafka option 'kafka.sasl.mechanism' AWS_MSK_IAM is a Java plugin that librdkafka "
                              "does not have; use SCRAM-SHA-512 credentials for the MSK cluster instead.")
        out["sasl.mechanisms"] = mechanism
    protocol = _pop(out, "security.protocol")
    if protocol is not None:
        out["security.protocol"] = protocol.strip().upper()


# -- sasl.jaas.config -------------------------------------------------------------------

_JAAS_ENTRY = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                         r"(?P<options>.*?)\s*;?\s*$", re.DOTALL | re.IGNORECASE)
_JAAS_OPTION = re.compile(r'\s*(?P<name>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))')


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """(login module's class name without package, its options) of a one-entry JAAS string
    such as ``org...ScramLoginModule required username="u" password="p\\"q";``."""
    entry = _JAAS_ENTRY.match(text)
    if entry is None:
        raise ConfigError("Kafka option 'kafka.sasl.jaas.config' must look like '<LoginModule class> required "
                          "name=\"value\" ...;'; it could not be read (its value is not shown: it holds secrets).")
    options: dict[str, str] = {}
    rest = entry.group("options")
    pos = 0
    while rest[pos:].strip():
        found = _JAAS_OPTION.match(rest, pos)
        if found is None:
            raise ConfigError("Kafka option 'kafka.sasl.jaas.config' has an option that is not name=\"value\" "
                              "after the login module (its value is not shown: it holds secrets).")
        quoted = found.group("quoted")
        options[found.group("name")] = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                                        else found.group("bare"))
        pos = found.end()
    return entry.group("module").rsplit(".", 1)[-1], options


def _jaas(out: dict[str, str], text: str, handler: str | None) -> None:
    module, options = parse_jaas(text)
    mechanism = out.get("sasl.mechanisms")
    expected = {"PlainLoginModule": ("PLAIN",), "ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
                "OAuthBearerLoginModule": ("OAUTHBEARER",), "Krb5LoginModule": ("GSSAPI",)}.get(module)
    if expected is not None and mechanism is not None and mechanism not in expected:
        raise ConfigError(f"Kafka option 'kafka.sasl.mechanism' is {mechanism}, but 'kafka.sasl.jaas.config' uses "
                          f"{module} (for {' or '.join(expected)}); make them agree.")
    if module == "ScramLoginModule" and mechanism is None:
        raise ConfigError("Kafka option 'kafka.sasl.jaas.config' uses ScramLoginModule: set "
                          "'kafka.sasl.mechanism' to SCRAM-SHA-256 or SCRAM-SHA-512 as well.")
    if module in ("PlainLoginModule", "ScramLoginModule"):
        _set_login(out, {"username": "sasl.username", "password": "sasl.password"}, options, module)
        out.setdefault("sasl.mechanisms", "PLAIN")
    elif module == "OAuthBearerLoginModule":
        _oauthbearer(out, options, handler)
    elif module == "Krb5LoginModule":
        if "keyTab" in options and options.get("useKeyTab", "true").lower() != "true":
            raise ConfigError("Kafka option 'kafka.sasl.jaas.config': Krb5LoginModule with a keyTab needs "
                              "useKeyTab=true.")
        _set_login(out, {"keyTab": "sasl.kerberos.keytab", "principal": "sasl.kerberos.principal",
                         "serviceName": "sasl.kerberos.service.name"}, options, module,
                   ignored=("useKeyTab", "storeKey", "useTicketCache", "doNotPrompt", "debug", "renewTGT"))
        out.setdefault("sasl.mechanisms", "GSSAPI")
    elif module == "IAMLoginModule":
        raise ConfigError("Kafka option 'kafka.sasl.jaas.config': the IAMLoginModule (AWS_MSK_IAM) is a Java "
                          "plugin librdkafka does not have; use SCRAM-SHA-512 credentials for the MSK cluster.")
    else:
        raise ConfigError(f"Kafka option 'kafka.sasl.jaas.config': login module {module} is not supported; "
                          "kafka_eos translates PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule "
                          "and Krb5LoginModule.")


def _set_login(out: dict[str, str], mapping: dict[str, str], options: dict[str, str], module: str,
               ignored: tuple[str, ...] = ()) -> None:
    for name, value in options.items():
        if name in ignored:
            continue
        if name not in mapping:
            raise ConfigError(f"Kafka option 'kafka.sasl.jaas.config': {module} option '{name}' has no librdkafka "
                              f"equivalent; remove it (translated: {', '.join(mapping)}).")
        _put(out, mapping[name], value, "sasl.jaas.config")


def _oauthbearer(out: dict[str, str], options: dict[str, str], handler: str | None) -> None:
    out.setdefault("sasl.mechanisms", "OAUTHBEARER")
    if handler is not None and not handler.strip().endswith(_OIDC_HANDLER):
        raise ConfigError(f"Kafka option 'kafka.sasl.login.callback.handler.class' {handler.strip()!r}: Java "
                          f"classes cannot be loaded by librdkafka; only Kafka's {_OIDC_HANDLER} (OIDC client "
                          "credentials) is translated.")
    unsecured = {k: v for k, v in options.items() if k.startswith("unsecuredLogin")}
    if unsecured:
        # Kafka's unsecured JWTs (test set-ups): librdkafka builds the same tokens itself.
        claims = {"unsecuredLoginStringClaim_sub": "principal", "unsecuredLoginLifetimeSeconds": "lifeSeconds",
                  "unsecuredLoginScopeClaimName": "scopeClaimName"}
        parts = []
        for name, value in unsecured.items():
            if name not in claims:
                raise ConfigError(f"Kafka option 'kafka.sasl.jaas.config': OAuthBearerLoginModule option "
                                  f"'{name}' has no librdkafka equivalent; remove it.")
            parts.append(f"{claims[name]}={value}")
        out["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
        out["sasl.oauthbearer.config"] = " ".join(parts)
        return
    mapping = {"clientId": "sasl.oauthbearer.client.id", "clientSecret": "sasl.oauthbearer.client.secret",
               "scope": "sasl.oauthbearer.scope"}
    extensions = []
    for name, value in options.items():
        if name.startswith("extension_"):
            extensions.append(f"{name[len('extension_'):]}={value}")
        elif name in mapping:
            _put(out, mapping[name], value, "sasl.jaas.config")
        else:
            raise ConfigError(f"Kafka option 'kafka.sasl.jaas.config': OAuthBearerLoginModule option '{name}' "
                              "has no librdkafka equivalent; remove it (translated: clientId, clientSecret, "
                              "scope, extension_*).")
    if extensions:
        out["sasl.oauthbearer.extensions"] = ",".join(extensions)
    out["sasl.oauthbearer.method"] = "oidc"
    if "sasl.oauthbearer.token.endpoint.url" not in out:
        raise ConfigError("OAUTHBEARER with client credentials needs 'kafka.sasl.oauthbearer.token.endpoint.url' "
                          "(the identity provider's token URL).")


# -- trust store and key store -------------------------------------------------------------


def _store_kind(key: str, location: str, declared: str | None) -> str:
    """PEM, PKCS12 or JKS: from the file's first bytes (Java's own default is JKS)."""
    try:
        with open(location, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise ConfigError(f"Kafka option 'kafka.{key}': cannot read {location!r} on the driver ({exc.strerror}).") \
            from None
    if head[:4] in (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce"):
        kind = "JKS"
    elif b"-----BEGIN" in head or head.lstrip()[:5] == b"-----":
        kind = "PEM"
    else:
        kind = "PKCS12"
    if declared is not None and declared.strip().upper() not in (kind, "JCEKS" if kind == "JKS" else kind):
        raise ConfigError(f"Kafka option 'kafka.{key.rsplit('.', 1)[0]}.type' says {declared.strip()}, but "
                          f"{location!r} is a {kind} file; fix the type or the file.")
    if kind == "JKS":
        raise ConfigError(f"Kafka option 'kafka.{key}': {_JKS_FIX}")
    return kind


def _truststore(out: dict[str, str], java: dict[str, str]) -> None:
    declared = java.pop("ssl.truststore.type", None)
    password = java.pop("ssl.truststore.password", None)
    inline = java.pop("ssl.truststore.certificates", None)
    location = java.pop("ssl.truststore.location", None)
    if inline is not None:
        _put(out, "ssl.ca.pem", inline, "ssl.truststore.certificates")
    if location is None:
        return
    kind = _store_kind("ssl.truststore.location", location, declared)
    if kind == "PEM":
        _put(out, "ssl.ca.location", location, "ssl.truststore.location")
    else:
        # librdkafka has no PKCS#12 trust store: its certificates travel as PEM text.
        _put(out, "ssl.ca.pem", pkcs12_certificates(location, password), "ssl.truststore.location")


def _keystore(out: dict[str, str], java: dict[str, str]) -> None:
    declared = java.pop("ssl.keystore.type", None)
    password = java.pop("ssl.keystore.password", None)
    chain = java.pop("ssl.keystore.certificate.chain", None)
    key = java.pop("ssl.keystore.key", None)
    location = java.pop("ssl.keystore.location", None)
    if chain is not None:
        _put(out, "ssl.certificate.pem", chain, "ssl.keystore.certificate.chain")
    if key is not None:
        _put(out, "ssl.key.pem", key, "ssl.keystore.key")
    if location is None:
        return
    kind = _store_kind("ssl.keystore.location", location, declared)
    if kind == "PEM":  # one file with the key and its certificate chain
        _put(out, "ssl.key.location", location, "ssl.keystore.location")
        _put(out, "ssl.certificate.location", location, "ssl.keystore.location")
    else:
        _put(out, "ssl.keystore.location", location, "ssl.keystore.location")
        if password is not None:
            _put(out, "ssl.keystore.password", password, "ssl.keystore.password")


def _endpoint_identification(out: dict[str, str]) -> None:
    # Java turns host-name checking off with an empty value; librdkafka with "none".
    for k in list(out):
        if k.lower() == "ssl.endpoint.identification.algorithm":
            value = out[k].strip().lower()
            out[k] = value or "none"
