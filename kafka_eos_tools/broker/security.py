"""Secured embedded clusters: the client listener's protocol, users, certificates, ACLs.

A secured cluster keeps three listeners per node:

* ``CLIENT`` (the node's port, the only one advertised to clients): SASL_PLAINTEXT with
  PLAIN and SCRAM-SHA-256/512, SSL (optionally requiring client certificates) or SASL_SSL;
* ``INTERNAL`` (inter-broker) and ``CONTROLLER``: PLAINTEXT on 127.0.0.1. Securing them
  would prove nothing about the connector (it never speaks to them) and would cost start-up
  time; their principal (``User:ANONYMOUS``) is a super user so replication, transaction
  markers and broker registration pass the authorizer. Clients learn only the CLIENT
  addresses from metadata, since metadata answers with the listener a client connected to.

Everything a test needs is generated per cluster under ``DIR/security`` (mode 0700): random
passwords (``credentials.json``, mode 0600), a CA, a broker certificate for
127.0.0.1/localhost (SAN), one client certificate per user, PKCS12 keystores/truststore and
the same material as PEM files. Certificates come from ``openssl``; the truststore from the
JDK's ``keytool`` (a PKCS12 truststore needs Java's trusted-certificate attribute).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from enum import Enum
from pathlib import Path
from typing import Any, Iterable

from kafka_eos_tools.errors import BrokerError

ADMIN = "admin"
# alice gets the ACLs a pipeline needs in tests; bob is a second, separately granted user.
USERS = (ADMIN, "alice", "bob")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Security(str, Enum):
    """The client listener's protocol (``python -m kafka_eos_tools broker start --security``)."""

    PLAINTEXT = "plaintext"
    SASL = "sasl"  # SASL_PLAINTEXT
    SSL = "ssl"  # TLS, server certificate only
    MTLS = "mtls"  # TLS requiring a client certificate
    SASL_SSL = "sasl_ssl"

    @property
    def protocol(self) -> str:
        return {"plaintext": "PLAINTEXT", "sasl": "SASL_PLAINTEXT", "ssl": "SSL", "mtls": "SSL",
                "sasl_ssl": "SASL_SSL"}[self.value]

    @property
    def sasl(self) -> bool:
        return self in (Security.SASL, Security.SASL_SSL)

    @property
    def tls(self) -> bool:
        return self in (Security.SSL, Security.MTLS, Security.SASL_SSL)

    @property
    def authenticates(self) -> bool:
        """Whether clients have a name of their own (ACLs need one)."""
        return self.sasl or self is Security.MTLS


def parse_security(value: str | Security | None) -> Security:
    if value is None or isinstance(value, Security):
        return value or Security.PLAINTEXT
    try:
        return Security(value.lower())
    except ValueError:
        known = ", ".join(s.value for s in Security)
        raise BrokerError(f"Unknown security {value!r} for the embedded Kafka; use one of: {known}.") from None


class Material:
    """The generated secrets and files of one secured cluster (``DIR/security``)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._passwords: dict[str, str] | None = None

    def __repr__(self) -> str:  # never the passwords
        return f"Material({str(self.directory)!r})"

    @property
    def credentials_path(self) -> Path:
        return self.directory / "credentials.json"

    def password(self, user: str) -> str:
        """A user's password; for TLS users also their keystore and key password."""
        if self._passwords is None:
            self._passwords = json.loads(self.credentials_path.read_text())
        if user not in self._passwords:
            raise BrokerError(f"No user {user!r} in this embedded cluster (users: {', '.join(USERS)}).")
        return self._passwords[user]

    @property
    def truststore_password(self) -> str:
        return self.password("truststore")

    def path(self, name: str) -> Path:
        return self.directory / name

    # -- generation ----------------------------------------------------------------
    def generate(self, tls: bool) -> None:
        """Create passwords (and certificates when ``tls``) once; a restart reuses them."""
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        if not self.credentials_path.exists():
            # Hex keeps every password free of quotes, commas and brackets, which the JAAS
            # line and the '--add-scram' argument would otherwise need escaped.
            passwords = {name: secrets.token_hex(12) for name in (*USERS, "broker", "truststore")}
            fd = os.open(self.credentials_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(passwords, fh)
        if tls and not (self.directory / ".certificates-complete").exists():
            self._certificates()
            (self.directory / ".certificates-complete").write_text("")

    def _certificates(self) -> None:
        for tool in ("openssl", "keytool"):
            if shutil.which(tool) is None:
                raise BrokerError(f"'{tool}' is not on PATH; a TLS embedded Kafka needs it to generate certificates "
                                  "(openssl, and keytool from the JDK).")
        ca_key, ca = self.path("ca.key"), self.path("ca.pem")
        _run(["openssl", "req", "-x509", *_NEW_KEY, "-keyout", ca_key, "-out", ca,
              "-days", "30", "-subj", "/CN=kafka-eos embedded CA",
              "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        self._signed("broker", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n")
        for user in USERS:
            self._signed(user, "extendedKeyUsage=clientAuth\n")
        truststore = self.path("truststore.p12")
        _run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", ca, "-keystore", truststore,
              "-storetype", "PKCS12", "-storepass:env", "KAFKA_EOS_STOREPASS"],
             env={"KAFKA_EOS_STOREPASS": self.truststore_password})

    def _signed(self, name: str, extensions: str) -> None:
        """``name.key``/``name.pem`` signed by the CA and ``name.p12`` (key, cert, CA chain)."""
        key, csr, cert = self.path(f"{name}.key"), self.path(f"{name}.csr"), self.path(f"{name}.pem")
        ext = self.path(f"{name}.ext")
        ext.write_text(extensions)
        _run(["openssl", "req", *_NEW_KEY, "-keyout", key, "-out", csr,
              "-subj", f"/CN={name}/O=kafka-eos"])
        _run(["openssl", "x509", "-req", "-in", csr, "-CA", self.path("ca.pem"), "-CAkey", self.path("ca.key"),
              "-CAcreateserial", "-out", cert, "-days", "30", "-extfile", ext])
        _run(["openssl", "pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", self.path("ca.pem"),
              "-name", name, "-out", self.path(f"{name}.p12"), "-passout", "env:KAFKA_EOS_STOREPASS"],
             env={"KAFKA_EOS_STOREPASS": self.password(name)})
        for leftover in (csr, ext):
            leftover.unlink()
        os.chmod(key, 0o600)


# EC P-256 keys: generated in milliseconds (RSA takes seconds on a busy machine), and
# both the JDK and librdkafka take them.
_NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


def _run(cmd: list[Any], env: dict[str, str] | None = None) -> None:
    # Passwords travel in the environment, never in argv (visible to every local user).
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise BrokerError(f"Generating TLS material failed ({cmd[0]} {cmd[1]}):\n{proc.stderr[-2000:]}")


# -- broker side -------------------------------------------------------------------
def listener_properties(security: Security, material: Material | None, acls: bool) -> dict[str, Any]:
    """The server.properties entries of the CLIENT listener (and the authorizer)."""
    if security is Security.PLAINTEXT:
        if acls:
            raise BrokerError("ACLs need clients with names: use security sasl, sasl_ssl or mtls.")
        return {}
    assert material is not None
    props: dict[str, Any] = {}
    if security.sasl:
        plain_users = " ".join(f'user_{u}="{material.password(u)}"' for u in USERS)
        props["listener.name.client.sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
        props["listener.name.client.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};")
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.client.{mechanism.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;")
    if security.tls:
        props.update({
            "listener.name.client.ssl.keystore.location": material.path("broker.p12"),
            "listener.name.client.ssl.keystore.type": "PKCS12",
            "listener.name.client.ssl.keystore.password": material.password("broker"),
            "listener.name.client.ssl.key.password": material.password("broker"),
            "listener.name.client.ssl.truststore.location": material.path("truststore.p12"),
            "listener.name.client.ssl.truststore.type": "PKCS12",
            "listener.name.client.ssl.truststore.password": material.truststore_password,
            "listener.name.client.ssl.client.auth": "required" if security is Security.MTLS else "none",
            # A certificate's CN is its user name: CN=alice,O=kafka-eos -> User:alice.
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/,DEFAULT",
        })
    if acls:
        if not security.authenticates:
            raise BrokerError(f"ACLs need clients with names; security {security.value!r} has none "
                              "(use sasl, sasl_ssl or mtls).")
        props.update({
            "authorizer.class.name": STANDARD_AUTHORIZER,
            # ANONYMOUS is the INTERNAL/CONTROLLER listeners' principal (see the module doc).
            "super.users": f"User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })
    return props


def scram_format_args(material: Material) -> list[str]:
    """``StorageTool format`` arguments creating every user for both SCRAM mechanisms:
    KRaft stores SCRAM credentials in the metadata log, so they can be written at format
    time, before any broker runs."""
    args: list[str] = []
    for user in USERS:
        for mechanism in SCRAM_MECHANISMS:
            args += ["--add-scram", f"{mechanism}=[name={user},password={material.password(user)}]"]
    return args


# -- client side -------------------------------------------------------------------
def librdkafka_config(security: Security, material: Material | None, bootstrap: str, user: str = ADMIN,
                      mechanism: str = "SCRAM-SHA-512", keystore: str = "PKCS12") -> dict[str, str]:
    """Settings for a confluent-kafka client acting as ``user``."""
    conf = {"bootstrap.servers": bootstrap}
    if security is Security.PLAINTEXT:
        return conf
    assert material is not None
    conf["security.protocol"] = security.protocol
    if security.sasl:
        conf.update({"sasl.mechanism": _mechanism(mechanism), "sasl.username": user,
                     "sasl.password": material.password(user)})
    if security.tls:
        conf["ssl.ca.location"] = str(material.path("ca.pem"))
    if security is Security.MTLS:
        if keystore == "PKCS12":
            conf.update({"ssl.keystore.location": str(material.path(f"{user}.p12")),
                         "ssl.keystore.password": material.password(user)})
        else:
            conf.update({"ssl.certificate.location": str(material.path(f"{user}.pem")),
                         "ssl.key.location": str(material.path(f"{user}.key"))})
    return conf


def java_options(security: Security, material: Material | None, bootstrap: str, user: str = ADMIN,
                 mechanism: str = "SCRAM-SHA-512", truststore: str = "PKCS12") -> dict[str, str]:
    """The same as a Spark option map in the Java client's names (``kafka.`` prefix), as a
    user of Spark's built-in ``format("kafka")`` writes it. ``truststore``: PKCS12, PEM (a
    PEM file as location) or PEM-inline (``ssl.truststore.certificates``)."""
    conf = {"bootstrap.servers": bootstrap}
    if security is not Security.PLAINTEXT:
        assert material is not None
        conf["security.protocol"] = security.protocol
    if security.sasl:
        assert material is not None
        mech = _mechanism(mechanism)
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mech == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        conf.update({"sasl.mechanism": mech,
                     "sasl.jaas.config": f'{module} required username="{user}" password="{material.password(user)}";'})
    if security.tls:
        assert material is not None
        if truststore == "PKCS12":
            conf.update({"ssl.truststore.location": str(material.path("truststore.p12")),
                         "ssl.truststore.type": "PKCS12", "ssl.truststore.password": material.truststore_password})
        elif truststore == "PEM":
            conf.update({"ssl.truststore.location": str(material.path("ca.pem")), "ssl.truststore.type": "PEM"})
        elif truststore == "PEM-inline":
            conf.update({"ssl.truststore.certificates": material.path("ca.pem").read_text().strip(),
                         "ssl.truststore.type": "PEM"})
        else:
            raise BrokerError(f"truststore must be PKCS12, PEM or PEM-inline, not {truststore!r}.")
    if security is Security.MTLS:
        assert material is not None
        conf.update({"ssl.keystore.location": str(material.path(f"{user}.p12")), "ssl.keystore.type": "PKCS12",
                     "ssl.keystore.password": material.password(user), "ssl.key.password": material.password(user)})
    return {f"kafka.{k}": v for k, v in conf.items()}


def _mechanism(mechanism: str) -> str:
    upper = mechanism.upper()
    if upper not in SASL_MECHANISMS:
        raise BrokerError(f"SASL mechanism {mechanism!r} is not enabled; use one of {', '.join(SASL_MECHANISMS)}.")
    return upper


# -- ACLs --------------------------------------------------------------------------
def pipeline_acls(user: str, *, read_topics: Iterable[str] = (), write_topics: Iterable[str] = (),
                  describe_topics: Iterable[str] = (), groups: Iterable[str] = (),
                  transactional_id_prefix: str | None = None, idempotent_write: bool = False) -> list:
    """ACL bindings (confluent-kafka ``AclBinding``) allowing ``user`` what a pipeline does:
    read/describe its input, write/describe its output (and the commit log), read its
    consumer group, write/describe transactional ids and read the sink's groups under a prefix. ``describe_topics``:
    topics the user may see but neither read nor write."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    principal = f"User:{user}"

    def allow(rtype: ResourceType, name: str, op: AclOperation,
              pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
        return AclBinding(rtype, name, pattern, principal, "*", op, AclPermissionType.ALLOW)

    bindings = []
    for topic in read_topics:
        bindings += [allow(ResourceType.TOPIC, topic, op)
                     for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)]
    for topic in write_topics:
        bindings += [allow(ResourceType.TOPIC, topic, op)
                     for op in (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)]
    for topic in describe_topics:
        bindings += [allow(ResourceType.TOPIC, topic, op)
                     for op in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)]
    for group in groups:
        bindings += [allow(ResourceType.GROUP, group, op) for op in (AclOperation.READ, AclOperation.DESCRIBE)]
    if transactional_id_prefix is not None:
        # The sink's transactional ids and its commit-log reader's group are named under
        # its prefix: one prefixed pattern each.
        bindings += [allow(ResourceType.TRANSACTIONAL_ID, transactional_id_prefix, op, ResourcePatternType.PREFIXED)
                     for op in (AclOperation.WRITE, AclOperation.DESCRIBE)]
        bindings += [allow(ResourceType.GROUP, transactional_id_prefix, op, ResourcePatternType.PREFIXED)
                     for op in (AclOperation.READ, AclOperation.DESCRIBE)]
    if idempotent_write:
        bindings.append(allow(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE))
    # A topic both read and written is described once: the admin API refuses duplicates.
    return list(dict.fromkeys(bindings))
