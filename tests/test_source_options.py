"""Source options: built-in names and semantics, one ConfigError naming the option."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source.options import DEFAULT_GROUP_ID_PREFIX, SourceOptions

BS = {"kafka.bootstrap.servers": "h:9092"}


def stream(**kw):
    return SourceOptions.from_spark({**BS, **kw}, streaming=True)


def batch(**kw):
    return SourceOptions.from_spark({**BS, **kw}, streaming=False)


def test_defaults_match_the_builtin_except_isolation():
    o = stream(subscribe="a")
    assert o.starting.kind == "latest"
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.client_conf == {"bootstrap.servers": "h:9092", "isolation.level": "read_committed"}
    assert o.commit_offsets_to_group is True
    assert batch(subscribe="a").starting.kind == "earliest"
    assert batch(subscribe="a").ending.kind == "latest"


def test_option_names_are_case_insensitive():
    o = SourceOptions.from_spark({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a", "STARTINGOFFSETS": "earliest",
                                  "maxoffsetspertrigger": "5"}, streaming=True)
    assert o.starting.kind == "earliest" and o.max_offsets_per_trigger == 5


@pytest.mark.parametrize("given", [{}, {"subscribe": "a", "assign": '{"a":[0]}'},
                                   {"subscribe": "a", "subscribePattern": "a.*"}])
def test_exactly_one_subscription(given):
    with pytest.raises(ConfigError, match="Exactly one of the options 'subscribe', 'subscribePattern', 'assign'"):
        stream(**given)


def test_bootstrap_servers_required():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        SourceOptions.from_spark({"subscribe": "a"}, streaming=True)


def test_subscribe_lists_are_trimmed_and_sorted():
    assert stream(subscribe=" b, a ,,").subscription.topics == ("a", "b")
    with pytest.raises(ConfigError, match="'subscribe' must list at least one topic"):
        stream(subscribe=" , ")


def test_subscribe_pattern_must_compile():
    with pytest.raises(ConfigError, match="'subscribePattern' is not a valid regex"):
        stream(subscribePattern="a[")


def test_assign_json():
    assert stream(assign='{"b": [1], "a": [2, 0]}').subscription.assigned == (("a", 0), ("a", 2), ("b", 1))
    for bad in ('{"a": {"0": 1}}', "[1]", "{}", "nope"):
        with pytest.raises(ConfigError, match="Option 'assign'"):
            stream(assign=bad)


@pytest.mark.parametrize("key,reason", [
    ("auto.offset.reset", "startingOffsets"),
    ("enable.auto.commit", "commitOffsetsToGroup"),
    ("key.deserializer", "binary"),
    ("value.deserializer", "binary"),
    ("enable.partition.eof", "EOF"),
    ("interceptor.classes", "unchanged"),
])
def test_connector_owned_kafka_keys_are_refused(key, reason):
    with pytest.raises(ConfigError, match=rf"kafka\.{key}.*{reason}"):
        stream(subscribe="a", **{f"kafka.{key}": "x"})


def test_other_kafka_keys_pass_through():
    o = stream(subscribe="a", **{"kafka.security.protocol": "SSL", "kafka.fetch.min.bytes": "1"})
    assert o.client_conf["security.protocol"] == "SSL" and o.client_conf["fetch.min.bytes"] == "1"


def test_isolation_level():
    assert stream(subscribe="a", **{"kafka.isolation.level": "read_uncommitted"}).read_committed is False
    with pytest.raises(ConfigError, match="kafka.isolation.level"):
        stream(subscribe="a", **{"kafka.isolation.level": "dirty"})


def test_starting_offsets_forms():
    assert stream(subscribe="a", startingOffsets="EARLIEST").starting.kind == "earliest"
    assert stream(subscribe="a", startingOffsets="group").starting.kind == "group"
    spec = stream(subscribe="a", startingOffsets='{"a": {"0": 5, "1": -2, "2": -1}}').starting
    assert spec.kind == "offsets" and spec.offsets == {("a", 0): 5, ("a", 1): -2, ("a", 2): -1}
    with pytest.raises(ConfigError, match="'startingOffsets' must be 'earliest', 'latest' or JSON"):
        stream(subscribe="a", startingOffsets="soonest")
    with pytest.raises(ConfigError, match="offset -3"):
        stream(subscribe="a", startingOffsets='{"a": {"0": -3}}')


def test_batch_refuses_latest_start_and_earliest_end():
    with pytest.raises(ConfigError, match="'startingOffsets' cannot be 'latest' for a batch read"):
        batch(subscribe="a", startingOffsets="latest")
    with pytest.raises(ConfigError, match="-1 \\(latest\\) is not allowed"):
        batch(subscribe="a", startingOffsets='{"a": {"0": -1}}')
    with pytest.raises(ConfigError, match="'endingOffsets' cannot be 'earliest'"):
        batch(subscribe="a", endingOffsets="earliest")
    with pytest.raises(ConfigError, match="-2 \\(earliest\\) is not allowed"):
        batch(subscribe="a", endingOffsets='{"a": {"0": -2}}')
    assert batch(subscribe="a", endingOffsets='{"a": {"0": 7}}').ending.offsets == {("a", 0): 7}


def test_streaming_refuses_ending_options():
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(ConfigError, match=f"'{name}' is for batch reads"):
            stream(subscribe="a", **{name: "latest"})


def test_timestamp_precedence_and_strategy():
    o = stream(subscribe="a", startingTimestamp="1000", startingOffsetsByTimestamp='{"a": {"0": 5}}',
               startingOffsets="earliest")
    assert (o.starting.kind, o.starting.timestamp, o.starting.strategy) == ("timestamp", 1000, "error")
    o = stream(subscribe="a", startingOffsetsByTimestamp='{"a": {"0": 5}}', startingOffsetsByTimestampStrategy="LATEST")
    assert o.starting.kind == "timestamps" and o.starting.offsets == {("a", 0): 5} and o.starting.strategy == "latest"
    with pytest.raises(ConfigError, match="startingOffsetsByTimestampStrategy"):
        stream(subscribe="a", startingTimestamp="1", startingOffsetsByTimestampStrategy="closest")
    with pytest.raises(ConfigError, match="'startingTimestamp' must be >= 0"):
        stream(subscribe="a", startingTimestamp="-5")
    e = batch(subscribe="a", endingTimestamp="2000").ending
    assert (e.kind, e.timestamp) == ("timestamp", 2000)


def test_admission_control_options():
    o = stream(subscribe="a", maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 30_000)
    assert stream(subscribe="a", maxTriggerDelay="250").max_trigger_delay_ms == 250
    assert stream(subscribe="a", maxTriggerDelay="2m").max_trigger_delay_ms == 120_000
    with pytest.raises(ConfigError, match="'maxOffsetsPerTrigger' must be >= 1"):
        stream(subscribe="a", maxOffsetsPerTrigger="0")
    with pytest.raises(ConfigError, match="'minOffsetsPerTrigger' \\(10\\) must not exceed 'maxOffsetsPerTrigger'"):
        stream(subscribe="a", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="10")
    with pytest.raises(ConfigError, match="'maxTriggerDelay' must be a duration"):
        stream(subscribe="a", maxTriggerDelay="soon")


def test_batch_reads_warn_about_and_ignore_streaming_only_options(caplog):
    # As the built-in source: a warning, and the read goes on.
    with caplog.at_level("WARNING", logger="kafka_eos_ds.source.options"):
        o = batch(subscribe="a", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="x", maxTriggerDelay="soon")
    assert o.max_offsets_per_trigger is None and o.min_offsets_per_trigger is None
    assert {n for n in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
            if n in caplog.text} == {"maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"}


def test_admission_control_options_are_accepted_on_old_pyspark(monkeypatch):
    # pyspark < 4.2 passes no read limits; the reader applies the options itself.
    from kafka_eos_ds.source import options

    monkeypatch.setattr(options, "admission_control_available", lambda: False)
    opts = stream(subscribe="a", maxOffsetsPerTrigger="5", minOffsetsPerTrigger="2", maxTriggerDelay="1s")
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger, opts.max_trigger_delay_ms) == (5, 2, 1000)


def test_group_id_is_stable_and_per_subscription():
    a1, a2 = stream(subscribe="a,b").group_id, stream(subscribe="b, a").group_id
    assert a1 == a2 and a1.startswith(DEFAULT_GROUP_ID_PREFIX + "-")
    assert stream(subscribe="c").group_id != a1
    assert stream(subscribe="a,b", groupIdPrefix="orders").group_id.startswith("orders-")
    explicit = stream(subscribe="a", **{"kafka.group.id": "lag-orders"})
    assert explicit.group_id == "lag-orders" and "group.id" not in explicit.client_conf
    assert stream(subscribe="a", commitOffsetsToGroup="false").commit_offsets_to_group is False


def test_options_pickle():
    import pickle

    o = stream(subscribe="a", startingOffsets='{"a": {"0": 1}}')
    assert pickle.loads(pickle.dumps(o)) == o


def test_bad_booleans_and_numbers_name_the_option():
    with pytest.raises(ConfigError, match="'failOnDataLoss' must be true or false"):
        stream(subscribe="a", failOnDataLoss="maybe")
    with pytest.raises(ConfigError, match="'minPartitions' must be a whole number"):
        stream(subscribe="a", minPartitions="many")


def test_unknown_client_setting_is_a_config_error_without_secrets():
    # Refused while the options are read, on the driver, before any client connects.
    with pytest.raises(ConfigError, match="no.such.setting") as failure:
        stream(subscribe="a", **{"kafka.no.such.setting": "x", "kafka.sasl.password": "hunter2"})
    assert "hunter2" not in str(failure.value)
    with pytest.raises(ConfigError, match="sasl.jaas.config") as failure:
        stream(subscribe="a", **{"kafka.sasl.jaas.config": "x hunter2"})
    assert "hunter2" not in str(failure.value)


def test_a_group_the_user_named_gets_no_lag_commits_unless_asked():
    assert stream(subscribe="a").commit_offsets_to_group is True
    named = {"kafka.group.id": "theirs"}
    assert stream(subscribe="a", **named).commit_offsets_to_group is False
    assert stream(subscribe="a", commitOffsetsToGroup="true", **named).commit_offsets_to_group is True


def test_source_options_print_without_secrets():
    o = stream(subscribe="a", **{"kafka.sasl.username": "u", "kafka.sasl.password": "hunter2",
                                 "kafka.ssl.key.password": "kp2"})
    assert "hunter2" not in repr(o) and "kp2" not in repr(o) and "[redacted]" in repr(o)
    from kafka_eos_ds.source.planning import ReadConfig

    assert "hunter2" not in repr(ReadConfig(client_conf=o.client_conf))
