"""Offsets as Spark compares them: canonical JSON text."""

from __future__ import annotations

import json

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source import offsets


def test_canonical_order_string_keys_plain_ints():
    a = {("b", 10): 5, ("a", 2): 1, ("b", 2): 3, ("a", 0): 7}
    assert offsets.dumps(a) == '{"a": {"0": 7, "2": 1}, "b": {"2": 3, "10": 5}}'
    # Insertion order must not matter: Spark compares the text.
    assert offsets.dumps(dict(reversed(list(a.items())))) == offsets.dumps(a)


def test_round_trip_through_spark_json():
    a = {("t", 0): 1, ("t", 1): 2, ("u", 0): 0}
    text = json.dumps(offsets.to_json(a))
    assert offsets.from_json(json.loads(text)) == a
    assert offsets.from_json(text) == a
    assert json.dumps(offsets.to_json(offsets.from_json(text))) == text


def test_values_are_ints_not_numpy_or_strings():
    out = offsets.to_json({("t", 0): True + 4})
    assert type(out["t"]["0"]) is int


def test_from_json_rejects_non_objects():
    with pytest.raises(ValueError):
        offsets.from_json("[1, 2]")
    with pytest.raises(ValueError):
        offsets.from_json({"t": [1]})


def test_parse_option_explains_format():
    with pytest.raises(ConfigError, match='JSON like {"topicA"'):
        offsets.parse_option("startingOffsets", "{bad")


def test_parse_timestamps():
    assert offsets.parse_timestamps("x", '{"t": {"1": 1000}}') == {("t", 1): 1000}
    with pytest.raises(ConfigError, match="must be >= 0"):
        offsets.parse_timestamps("x", '{"t": {"1": -1}}')
