"""The exactly-once pipeline on secured clusters, configured as a Spark user configures
the built-in ``format("kafka")``: with the Java client's option names.

Each run reads an input topic with ``format("kafka_eos")``, writes the output with
``format("kafka_eos")`` exactly once (``availableNow``, several micro-batches), and the
output is audited as a read_committed reader: every input record once, no duplicate, no
loss. Each run's complete driver output (Spark's log, the ``kafka_eos_ds``
loggers at DEBUG, the query's exception and progress) must hold none of the cluster's
secrets. Users without a needed ACL get an error naming the missing authorization, and
nothing of their batch becomes visible.

The same option maps also drive Spark's built-in connector, which shows they are genuine
Java client settings; and the ACL set is run in librdkafka form, the connector's own.
"""

from __future__ import annotations

import json
import re

import pytest

from integration.secured import COMMIT_LOG, grant, leaked, new_pipeline, run_driver, start_secured
from kafka_eos_tools.audit import audit
from kafka_eos_tools.topics import consume_all

# Secured brokers of its own: the gate runs it in its second lane (scripts/test.sh).
pytestmark = pytest.mark.second_lane

RECORDS = 600  # 2 partitions, 200 offsets per trigger: a few micro-batches

TXN_DENIED = re.compile(r"TRANSACTIONAL_ID_AUTHORIZATION_FAILED|[Tt]ransactional.?[Ii]d.{0,20}[Aa]uthori[sz]")
TOPIC_DENIED = re.compile(r"TOPIC_AUTHORIZATION_FAILED|[Tt]opic.{0,20}[Aa]uthori[sz]")


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    """SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256/512) with ACLs: only the admin is a super user."""
    yield from start_secured(tmp_path_factory.mktemp("sec-sasl"), "sasl", acls=True)


@pytest.fixture(scope="module")
def ssl(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("sec-ssl"), "ssl")


@pytest.fixture(scope="module")
def mtls(tmp_path_factory):
    yield from start_secured(tmp_path_factory.mktemp("sec-mtls"), "mtls")


def _librdkafka_form(cluster, user: str) -> dict:
    return {f"kafka.{k}": v for k, v in cluster.client_config(user).items()}


def _run(cluster, pipe, options, tmp_path, sink_format="kafka_eos", sink_options=None):
    run = run_driver(pipe, options, tmp_path / "driver", sink_format, sink_options=sink_options)
    assert "QUERY EXCEPTION:" in run.log, run.log[-3000:]  # the capture holds the whole run
    found = leaked(run.log, cluster) + leaked(json.dumps(run.result), cluster)
    assert found == [], f"secrets of {sorted(set(found))} appear in the driver's output ({tmp_path}/driver)"
    return run


def _assert_exactly_once(cluster, pipe, run) -> None:
    assert run.result["exception"] is None, str(run.result["exception"])[-3000:]
    report = audit(cluster.admin_config(), pipe.input, pipe.output, timeout=60)
    print(report.table())
    assert report.records_in == RECORDS
    assert (report.unique_out, report.duplicates, report.losses) == (RECORDS, 0, 0), report.table()
    assert report.ok, report.table()
    assert len([p for p in run.result["progress"] if p.get("numInputRows")]) >= 2


def _assert_denied(cluster, pipe, run, missing: re.Pattern) -> None:
    error = run.result["exception"]
    assert error, "the query succeeded without the ACL"
    assert missing.search(error), error[-3000:]
    assert consume_all(cluster.bootstrap, pipe.output, client=cluster.admin_config()) == []


# -- the connector configured in Java form --------------------------------------------
# CI runs the SCRAM case (the stronger mechanism, the same translation path); the full
# profile both. So for each pair below: CI runs the first form, the full profile all.
@pytest.mark.parametrize("mechanism", [pytest.param("PLAIN", marks=pytest.mark.full), "SCRAM-SHA-512"])
def test_sasl_pipeline_with_jaas_config(sasl, mechanism, tmp_path):
    pipe = new_pipeline(sasl, RECORDS)
    grant(sasl, "alice", pipe)
    options = sasl.java_options("alice", mechanism)
    assert options["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required" if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule required")
    _assert_exactly_once(sasl, pipe, _run(sasl, pipe, options, tmp_path))


@pytest.mark.full  # TLS runs in the gate through the mutual-TLS pipeline
def test_ssl_pipeline_with_pkcs12_truststore(ssl, tmp_path):
    pipe = new_pipeline(ssl, RECORDS)
    options = ssl.java_options("alice")
    assert options["kafka.ssl.truststore.type"] == "PKCS12"
    _assert_exactly_once(ssl, pipe, _run(ssl, pipe, options, tmp_path))


@pytest.mark.parametrize("truststore", ["PKCS12", pytest.param("PEM", marks=pytest.mark.full),
                                        pytest.param("PEM-inline", marks=pytest.mark.full)])
def test_mutual_tls_pipeline_with_pkcs12_keystore(mtls, truststore, tmp_path):
    pipe = new_pipeline(mtls, RECORDS)
    options = mtls.java_options("alice", truststore=truststore)
    assert options["kafka.ssl.keystore.type"] == "PKCS12"
    _assert_exactly_once(mtls, pipe, _run(mtls, pipe, options, tmp_path))


@pytest.mark.full  # the gate's SASL pipeline above runs as a granted user who is no super user
@pytest.mark.parametrize("form", ["java", "librdkafka"])
def test_acls_let_a_granted_user_run_the_pipeline(sasl, form, tmp_path):
    pipe = new_pipeline(sasl, RECORDS)
    grant(sasl, "bob", pipe)
    options = sasl.java_options("bob") if form == "java" else _librdkafka_form(sasl, "bob")
    _assert_exactly_once(sasl, pipe, _run(sasl, pipe, options, tmp_path))


@pytest.mark.parametrize("form", ["java", pytest.param("librdkafka", marks=pytest.mark.full)])
def test_acls_without_the_transactional_id_fail_the_query_and_show_nothing(sasl, form, tmp_path):
    pipe = new_pipeline(sasl, RECORDS)
    grant(sasl, "bob", pipe, transactional_ids=False)
    options = sasl.java_options("bob") if form == "java" else _librdkafka_form(sasl, "bob")
    _assert_denied(sasl, pipe, _run(sasl, pipe, options, tmp_path), TXN_DENIED)


@pytest.mark.full  # a refused ACL fails the query in the gate through the transactional id's
def test_acls_without_write_on_the_output_fail_the_query_and_show_nothing(sasl, tmp_path):
    pipe = new_pipeline(sasl, RECORDS)
    grant(sasl, "bob", pipe, write_output=False)  # the output stays visible (DESCRIBE), not writable
    options = sasl.java_options("bob")
    _assert_denied(sasl, pipe, _run(sasl, pipe, options, tmp_path), TOPIC_DENIED)


@pytest.mark.full  # the unit test of the attach step checks the error; this, the broker's answer and the output
def test_acls_without_read_on_the_source_group_refuse_the_batch_undecided_naming_the_option(sasl, tmp_path):
    # Review #6: with 'sourceGroupId', the batch's offsets ride in its first transaction
    # (AddOffsetsToTxn, TxnOffsetCommit), which needs READ on the group. Refused, the
    # batch must stop undecided, naming the option and the grant, not wedge decided.
    from kafka_eos_ds.kafka_sink import list_transactions
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog

    pipe = new_pipeline(sasl, RECORDS)
    # The source's own group is granted (its consumer needs it); the group the sink is
    # told to commit to is not.
    grant(sasl, "bob", pipe)
    group = f"{pipe.group}-sink"
    run = _run(sasl, pipe, sasl.java_options("bob"), tmp_path, sink_options={"sourceGroupId": group})
    error = run.result["exception"]
    assert error and "Option 'sourceGroupId'" in error and f"READ on group '{group}'" in error, \
        (error or run.log)[-3000:]
    assert "GroupAuthorizationFailed" in error
    assert consume_all(sasl.bootstrap, pipe.output, client=sasl.admin_config()) == []
    # Undecided: the commit log holds no decision of the query, and no transaction of the
    # prefix is left open to hold back read_committed readers.
    log = KafkaDecisionLog(sasl.admin_config(), COMMIT_LOG, pipe.prefix)
    assert [d for _, d in log.unfinished("q")] == []
    assert list_transactions(sasl.admin_config(), pipe.prefix, open_only=True) == []


# -- the same Java option maps with Spark's built-in connector -------------------------
# The full profile only: the gate's pipelines above already run on the Java option names.
# One case per security mode (SASL, TLS, mutual TLS): the other forms of each mode (PLAIN,
# an inline PEM) are options the same Java client reads, and run with kafka_eos above
# (docs/dev/decisions.md, "The full profile runs each variant once").
@pytest.mark.parametrize("cluster_name, user, kwargs", [
    pytest.param("sasl", "alice", {"mechanism": "SCRAM-SHA-512"}, marks=pytest.mark.full),
    pytest.param("mtls", "alice", {"truststore": "PKCS12"}, marks=pytest.mark.full),
    pytest.param("ssl", "alice", {"truststore": "PEM"}, marks=pytest.mark.full),
])
def test_the_java_options_work_with_the_builtin_connector(request, cluster_name, user, kwargs, tmp_path):
    cluster = request.getfixturevalue(cluster_name)
    pipe = new_pipeline(cluster, RECORDS)
    if cluster.acls:
        grant(cluster, user, pipe)
    run = _run(cluster, pipe, cluster.java_options(user, **kwargs), tmp_path, sink_format="kafka")
    # No fault is injected, so even the built-in at-least-once sink writes each record once.
    _assert_exactly_once(cluster, pipe, run)
