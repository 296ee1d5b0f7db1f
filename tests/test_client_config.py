"""Client settings: Java settings translated, every client built from the same settings
(kafka-python's too), secrets hidden."""

from __future__ import annotations

import os
import ssl
import stat

import pytest

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.java_settings import parse_jaas, translate
from kafka_eos_ds.kafka.kafka_python import to_kafka_python
from kafka_eos_ds.kafka.settings import ClientParams, client_config, connection_settings, redact

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


# -- certificates for the TLS cases ---------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a client key and certificate, as PEM and PKCS#12 files (openssl command)."""
    import subprocess

    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
        "-out", "ca.pem", "-subj", "/CN=test-ca", "-days", "2")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "client.key",
        "-out", "client.csr", "-subj", "/CN=client")
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "client.pem", "-days", "2")
    run("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "truststore.p12", "-passout", "pass:trustpw")
    run("pkcs12", "-export", "-in", "client.pem", "-inkey", "client.key", "-certfile", "ca.pem",
        "-out", "keystore.p12", "-passout", "pass:keypw")
    (d / "store.jks").write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    files = {name: str(d / name) for name in ("ca.pem", "client.pem", "client.key", "truststore.p12",
                                               "keystore.p12", "store.jks")}
    return files | {"ca_pem": (d / "ca.pem").read_text(), "client_pem": (d / "client.pem").read_text(),
                    "client_key": (d / "client.key").read_text()}


# -- sasl.jaas.config -------------------------------------------------------------------------


def test_jaas_is_parsed_with_quotes_escapes_and_the_trailing_semicolon():
    module, options = parse_jaas(f'{SCRAM}   required\n username="alice"  password="p\\"w;d=x" ;')
    assert module == "ScramLoginModule"
    assert options == {"username": "alice", "password": 'p"w;d=x'}
    assert parse_jaas(f"{PLAIN} required username=bob password=secret")[1] == {"username": "bob",
                                                                                "password": "secret"}
    assert parse_jaas(f"kafkashaded.{PLAIN} required;")[0] == "PlainLoginModule"


def test_plain_and_scram_become_librdkafka_username_and_password():
    out = translate({"bootstrap.servers": "h:1", "security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                     "sasl.jaas.config": f'{PLAIN} required username="u" password="p";'})
    assert out == {"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                   "sasl.username": "u", "sasl.password": "p"}
    out = translate({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-512",
                     "sasl.jaas.config": f'{SCRAM} required username="u" password="p";'})
    assert out["sasl.mechanisms"] == "SCRAM-SHA-512" and out["sasl.username"] == "u"


def test_scram_without_a_mechanism_and_mismatches_are_refused():
    with pytest.raises(ConfigError, match="kafka.sasl.mechanism"):
        translate({"sasl.jaas.config": f'{SCRAM} required username="u" password="p";'})
    with pytest.raises(ConfigError, match="make them agree"):
        translate({"sasl.mechanism": "PLAIN", "sasl.jaas.config": f'{SCRAM} required username="u" password="p";'})
    with pytest.raises(ConfigError, match="conflicts"):
        translate({"sasl.username": "other", "sasl.mechanism": "PLAIN",
                   "sasl.jaas.config": f'{PLAIN} required username="u" password="p";'})


def test_unreadable_jaas_is_refused_without_showing_it():
    with pytest.raises(ConfigError, match="kafka.sasl.jaas.config") as err:
        translate({"sasl.jaas.config": 'username="u" password="hunter2"'})
    assert "hunter2" not in str(err.value)


def test_oauthbearer_client_credentials_become_librdkafka_oidc():
    out = translate({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.jaas.config": f'{OAUTH} required clientId="cid" clientSecret="cs" scope="kafka" '
                            f'extension_logicalCluster="lkc-1";'})
    assert out == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
                   "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.method": "oidc",
                   "sasl.oauthbearer.client.id": "cid", "sasl.oauthbearer.client.secret": "cs",
                   "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.extensions": "logicalCluster=lkc-1"}


def test_oauthbearer_what_librdkafka_lacks_is_refused_naming_it():
    with pytest.raises(ConfigError, match="token.endpoint.url"):
        translate({"sasl.jaas.config": f'{OAUTH} required clientId="c" clientSecret="s";'})
    with pytest.raises(ConfigError, match="'kafka.sasl.oauthbearer.sub.claim.name'"):
        translate({"sasl.oauthbearer.sub.claim.name": "sub"})
    with pytest.raises(ConfigError, match="sasl.login.callback.handler.class"):
        translate({"sasl.login.callback.handler.class": "com.acme.MyHandler",
                   "sasl.jaas.config": f'{OAUTH} required clientId="c" clientSecret="s";'})


def test_kerberos_keytab_is_translated_and_iam_refused():
    out = translate({"sasl.mechanism": "GSSAPI", "sasl.jaas.config":
                     'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
                     'keyTab="/etc/k.keytab" principal="spark@EXAMPLE.COM";',
                     "sasl.kerberos.service.name": "kafka"})
    assert out["sasl.kerberos.keytab"] == "/etc/k.keytab"
    assert out["sasl.kerberos.principal"] == "spark@EXAMPLE.COM"
    with pytest.raises(ConfigError, match="AWS_MSK_IAM"):
        translate({"sasl.mechanism": "AWS_MSK_IAM"})
    with pytest.raises(ConfigError, match="IAMLoginModule"):
        translate({"sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"})


@pytest.mark.parametrize("key, hint", [
    ("java.security.auth.login.config", "sasl.jaas.config"),
    ("spark.kafka.clusters.c1.auth.bootstrap.servers", "delegation tokens"),
    ("buffer.memory", "queue.buffering.max.kbytes"),
    ("ssl.enabled.protocols", "remove it"),
])
def test_java_only_settings_are_refused_naming_key_and_equivalent(key, hint):
    with pytest.raises(ConfigError, match=f"'kafka.{key}'.*{hint}"):
        translate({key: "x"})


def test_java_names_with_a_librdkafka_twin_are_renamed():
    out = translate({"max.request.size": "2000000", "delivery.timeout.ms": "60000",
                     "ssl.endpoint.identification.algorithm": ""})
    assert out == {"message.max.bytes": "2000000", "message.timeout.ms": "60000",
                   "ssl.endpoint.identification.algorithm": "none"}


# -- trust and key stores ---------------------------------------------------------------------


def test_pem_truststore_and_inline_pems(pki):
    out = translate({"ssl.truststore.type": "PEM", "ssl.truststore.location": pki["ca.pem"]})
    assert out == {"ssl.ca.location": pki["ca.pem"]}
    out = translate({"ssl.truststore.certificates": pki["ca_pem"], "ssl.keystore.type": "PEM",
                     "ssl.keystore.certificate.chain": pki["client_pem"], "ssl.keystore.key": pki["client_key"]})
    assert out == {"ssl.ca.pem": pki["ca_pem"], "ssl.certificate.pem": pki["client_pem"],
                   "ssl.key.pem": pki["client_key"]}


def test_pkcs12_truststore_becomes_pem_text_and_keystore_goes_to_librdkafka(pki):
    out = translate({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": pki["truststore.p12"],
                     "ssl.truststore.password": "trustpw", "ssl.keystore.type": "PKCS12",
                     "ssl.keystore.location": pki["keystore.p12"], "ssl.keystore.password": "keypw",
                     "ssl.key.password": "keypw"})
    assert out["ssl.ca.pem"] == pki["ca_pem"]
    assert out["ssl.keystore.location"] == pki["keystore.p12"] and out["ssl.keystore.password"] == "keypw"
    # librdkafka accepts the result (it loads the certificates at construction).
    from kafka_eos_ds.kafka.settings import check_settings

    check_settings({**out, "security.protocol": "SSL"})


def test_wrong_pkcs12_password_and_jks_are_refused_with_the_fix(pki):
    with pytest.raises(ConfigError, match="ssl.truststore.password"):
        translate({"ssl.truststore.location": pki["truststore.p12"], "ssl.truststore.password": "wrong"})
    with pytest.raises(ConfigError, match="keytool -importkeystore .* -deststoretype PKCS12"):
        translate({"ssl.truststore.location": pki["store.jks"], "ssl.truststore.password": "x"})
    with pytest.raises(ConfigError, match="says PKCS12"):
        translate({"ssl.truststore.location": pki["ca.pem"], "ssl.truststore.type": "PKCS12"})


# -- kafka-python --------------------------------------------------------------------------


def test_sasl_settings_reach_the_kafka_python_client():
    out = to_kafka_python({"bootstrap.servers": "h:1,h:2", "security.protocol": "sasl_plaintext",
                           "sasl.mechanisms": "scram-sha-512", "sasl.username": "u", "sasl.password": "p",
                           "client.id": "mine", "linger.ms": "5"})
    assert out == {"bootstrap_servers": "h:1,h:2", "security_protocol": "SASL_PLAINTEXT",
                   "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "u", "sasl_plain_password": "p",
                   "client_id": "mine"}


def test_tls_settings_reach_the_kafka_python_client_as_one_context(pki):
    for settings in ({"ssl.ca.location": pki["ca.pem"], "ssl.certificate.location": pki["client.pem"],
                      "ssl.key.location": pki["client.key"]},
                     {"ssl.ca.pem": pki["ca_pem"], "ssl.certificate.pem": pki["client_pem"],
                      "ssl.key.pem": pki["client_key"]},
                     {"ssl.ca.pem": pki["ca_pem"], "ssl.keystore.location": pki["keystore.p12"],
                      "ssl.keystore.password": "keypw"}):
        out = to_kafka_python({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                               "ssl.endpoint.identification.algorithm": "none", **settings})
        ctx = out["ssl_context"]
        assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and not ctx.check_hostname
        assert len(ctx.get_ca_certs()) == 1
        assert not [n for n in os.listdir(_tmp()) if n.startswith("kafka-eos-client-")]  # temporary PEMs gone
    out = to_kafka_python({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                           "enable.ssl.certificate.verification": "false"})
    assert out["ssl_context"].verify_mode == ssl.CERT_NONE


def _tmp() -> str:
    import tempfile

    return tempfile.gettempdir()


def test_the_temporary_key_file_is_private(pki, monkeypatch):
    import kafka_eos_ds.kafka.kafka_python as kp

    modes = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self, path, *a, **k):
        modes.append(stat.S_IMODE(os.stat(path).st_mode))
        return real(self, path, *a, **k)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    kp.to_kafka_python({"bootstrap.servers": "h:1", "security.protocol": "SSL",
                        "ssl.certificate.pem": pki["client_pem"], "ssl.key.pem": pki["client_key"]})
    assert modes == [0o600]


def test_oauthbearer_reaches_kafka_python_as_a_token_provider():
    out = to_kafka_python({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                           "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                           "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                           "sasl.oauthbearer.client.id": "c", "sasl.oauthbearer.client.secret": "s3cret"})
    assert out["sasl_mechanism"] == "OAUTHBEARER" and "s3cret" not in repr(out["sasl_oauth_token_provider"])
    with pytest.raises(ConfigError, match="oidc"):
        to_kafka_python({"bootstrap.servers": "h:1", "sasl.mechanisms": "OAUTHBEARER"})


def test_admin_config_needs_bootstrap():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        to_kafka_python({"security.protocol": "PLAINTEXT"})


def test_an_unsupported_kafka_python_fails_naming_the_fix():
    from kafka_eos_ds.kafka.kafka_python import check_version

    check_version("3.0.12")
    for version in ("2.0.2", "3.0.9", "4.0.0"):
        with pytest.raises(KafkaClientError, match=r"pip install 'kafka-python>=3.0.10,<4'"):
            check_version(version)


# -- one config per client -------------------------------------------------------------------

SECURED = {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER",
           "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "c",
           "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.token.endpoint.url": "https://idp/t",
           "ssl.keystore.location": "/k.p12", "ssl.keystore.password": "kp", "ssl.ca.pem": "CA",
           "ssl.certificate.pem": "C", "ssl.key.pem": "K", "enable.ssl.certificate.verification": "false",
           "client.id": "mine", "client.dns.lookup": "use_all_dns_ips", "socket.timeout.ms": "5000"}


@pytest.mark.parametrize("role", ["sink_metadata", "commit_log", "source_metadata", "task_producer",
                                  "source_reader", "cli", "audit"])
def test_every_client_gets_every_connection_and_security_setting(role):
    conf = client_config({**SECURED, "linger.ms": "5"}, role)
    assert {k: conf[k] for k in SECURED} == SECURED


def test_driver_clients_do_not_get_record_tuning():
    assert connection_settings({**SECURED, "linger.ms": "5", "acks": "all", "fetch.min.bytes": "1"}) == SECURED


def test_task_producer_partitions_keys_like_the_java_client_unless_told_otherwise():
    assert client_config({"bootstrap.servers": "h:1"}, "task_producer")["partitioner"] == "murmur2_random"
    assert client_config({"partitioner": "consistent_random"}, "task_producer")["partitioner"] == "consistent_random"


def test_task_producer_takes_records_as_large_as_the_java_producer_unless_told_otherwise():
    """librdkafka refuses records over 1,000,000 bytes by default; Spark's built-in sink
    (the Java producer, max.request.size 1,048,576) writes them."""
    from confluent_kafka import Producer

    from kafka_eos_ds.kafka.java_settings import translate

    assert client_config({"bootstrap.servers": "h:1"}, "task_producer")["message.max.bytes"] == 1_048_576
    assert client_config({"message.max.bytes": "500000"}, "task_producer")["message.max.bytes"] == "500000"
    java = translate({"max.request.size": "2000000"})
    assert client_config(java, "task_producer")["message.max.bytes"] == "2000000"
    # librdkafka accepts the default next to its own others (a producer builds, nothing connects).
    Producer({k: v for k, v in client_config({}, "task_producer").items() if k not in ("logger", "error_cb")})


def test_the_sink_metadata_client_is_built_with_every_security_setting(monkeypatch):
    """The sink's driver metadata client once kept only a few keys (no OAUTHBEARER, no
    PKCS#12, no inline PEM), then said it could not reach Kafka."""
    import confluent_kafka.admin as admin

    from kafka_eos_ds.kafka.metadata import cluster_metadata

    built = []

    class FakeAdmin:
        def __init__(self, conf):
            built.append(conf)

        def list_topics(self, timeout):
            return "metadata"

    monkeypatch.setattr(admin, "AdminClient", FakeAdmin)

    assert cluster_metadata(ClientParams({**SECURED, "acks": "all"})) == "metadata"
    assert {k: built[0][k] for k in SECURED} == SECURED


# -- secrets ------------------------------------------------------------------------------------

SECRETS = {
    "sasl.password": "S1", "sasl.jaas.config": "S2", "ssl.key.password": "S3", "ssl.keystore.password": "S4",
    "ssl.truststore.password": "S5", "ssl.key.pem": "S6", "ssl.keystore.key": "S7",
    "sasl.oauthbearer.client.secret": "S8", "sasl.oauthbearer.assertion.private.key.pem": "S9",
    "sasl.oauthbearer.config": "S10", "sasl.oauthbearer.assertion.private.key.passphrase": "S11",
}


def test_redact_hides_every_secret_and_keeps_the_rest():
    safe = redact({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", **SECRETS})
    assert not any(s in repr(safe) for s in SECRETS.values())
    assert safe["bootstrap.servers"] == "h:1" and safe["security.protocol"] == "SASL_SSL"


def test_client_params_print_without_secrets():
    params = ClientParams({"bootstrap.servers": "h:1", **SECRETS})
    assert "h:1" in repr(params) and not any(s in repr(params) + str(params) + f"{params}"
                                             for s in SECRETS.values())


def test_librdkafka_logs_go_to_python_logging():
    from kafka_eos_ds.kafka.settings import LIBRDKAFKA_LOGGER, logged

    conf = logged({"bootstrap.servers": "h:9092"})
    assert conf == {"bootstrap.servers": "h:9092", "logger": LIBRDKAFKA_LOGGER}
    assert LIBRDKAFKA_LOGGER.name == "kafka_eos_ds.librdkafka"


# -- the CLI ------------------------------------------------------------------------------------


def test_properties_files_are_read_as_java_reads_them(tmp_path):
    from kafka_eos_ds.cli import read_properties

    path = tmp_path / "client.properties"
    path.write_text("# a comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism : SCRAM-SHA-256\n"
                    f"sasl.jaas.config={SCRAM} required \\\n    username=\"u\" \\\n    password=\"p\";\n"
                    "ssl.endpoint.identification.algorithm=\n")
    assert read_properties(str(path)) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": f'{SCRAM} required username="u" password="p";',
        "ssl.endpoint.identification.algorithm": ""}


def test_the_transactions_cli_takes_x_settings_and_a_command_config(tmp_path, monkeypatch):
    import kafka_eos_ds.kafka_sink as sink
    from kafka_eos_ds import cli

    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f"sasl.jaas.config={PLAIN} required username=\"u\" password=\"p\";\n")
    seen = []
    monkeypatch.setattr(sink, "list_transactions", lambda conf, prefix, family=None: seen.append(dict(conf)) or [])
    assert cli.main(["transactions", "list", "--bootstrap", "h:1", "--prefix", "etl", "--command-config",
                     str(path), "-X", "client.id=ops", "-X", "socket.timeout.ms=5000"]) == 0
    assert seen == [{"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                     "sasl.username": "u", "sasl.password": "p", "client.id": "ops", "socket.timeout.ms": "5000"}]
    assert cli.main(["transactions", "list", "--bootstrap", "h:1", "--prefix", "etl", "-X", "bogus.key=1"]) == 2


def test_unsecured_oauthbearer_jwt_becomes_librdkafkas_unsecure_jwt():
    out = translate({"bootstrap.servers": "b:9092", "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config":
                     'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                     'unsecuredLoginStringClaim_sub="alice";'})
    assert out["sasl.mechanisms"] == "OAUTHBEARER"
    assert (out["enable.sasl.oauthbearer.unsecure.jwt"], out["sasl.oauthbearer.config"]) == ("true", "principal=alice")
    assert "sasl.jaas.config" not in out


def test_socket_buffer_sizes_get_librdkafkas_names():
    out = translate({"bootstrap.servers": "b:9092", "receive.buffer.bytes": "65536", "send.buffer.bytes": "131072"})
    assert (out["socket.receive.buffer.bytes"], out["socket.send.buffer.bytes"]) == ("65536", "131072")
    assert "receive.buffer.bytes" not in out and "send.buffer.bytes" not in out


@pytest.mark.parametrize("key, option", [("max.poll.records", "arrowBatchRecords"),
                                         ("default.api.timeout.ms", "kafkaConsumer.pollTimeoutMs")])
def test_java_consumer_limits_are_refused_naming_the_source_option(key, option):
    with pytest.raises(ConfigError, match=f"'kafka.{key}'.*'{option}'"):
        translate({"bootstrap.servers": "b:9092", key: "10"})
