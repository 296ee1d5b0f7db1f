from __future__ import annotations

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.options import Options


def test_lookup_is_case_insensitive():
    opts = Options({"Kafka.Bootstrap.Servers": "h:1", "startingOffsets": "earliest"})
    assert opts.get("kafka.bootstrap.servers") == "h:1"
    assert opts.get("STARTINGOFFSETS") == "earliest"
    assert "startingoffsets" in opts


def test_kafka_params_strip_prefix_and_keep_client_key_case():
    opts = Options({"kafka.bootstrap.servers": "h:1", "kafka.sasl.mechanism": "PLAIN", "subscribe": "t"})
    assert opts.kafka_params() == {"bootstrap.servers": "h:1", "sasl.mechanisms": "PLAIN"}


def test_kafka_params_require_bootstrap_servers():
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        Options({"subscribe": "t"}).kafka_params()


def test_owned_kafka_key_is_refused_with_the_reason():
    opts = Options({"kafka.bootstrap.servers": "h:1", "kafka.transactional.id": "x"})
    with pytest.raises(ConfigError, match=r"kafka\.transactional\.id.*use transactionalIdPrefix"):
        opts.kafka_params(owned={"transactional.id": "use transactionalIdPrefix instead."})


@pytest.mark.parametrize("raw,expected", [("true", True), ("FALSE", False), ("1", True), ("no", False)])
def test_bool_values(raw, expected):
    assert Options({"failOnDataLoss": raw}).get_bool("failOnDataLoss", not expected) is expected


def test_bad_values_name_the_option():
    with pytest.raises(ConfigError, match="'failOnDataLoss' must be true or false"):
        Options({"failOnDataLoss": "maybe"}).get_bool("failOnDataLoss", True)
    with pytest.raises(ConfigError, match="'maxOffsetsPerTrigger' must be a whole number"):
        Options({"maxOffsetsPerTrigger": "ten"}).get_int("maxOffsetsPerTrigger")
    with pytest.raises(ConfigError, match="'minPartitions' must be >= 1"):
        Options({"minPartitions": "0"}).get_int("minPartitions", minimum=1)
    with pytest.raises(ConfigError, match="'deliveryGuarantee' must be one of exactly_once, at_least_once"):
        Options({"deliveryGuarantee": "twice"}).get_choice("deliveryGuarantee", ["exactly_once", "at_least_once"],
                                                           "exactly_once")


def test_required_option_message_gives_the_fix():
    with pytest.raises(ConfigError, match="'topic' is required. Set .option"):
        Options({}).require("topic", "Set .option('topic', name) or provide a topic column.")
