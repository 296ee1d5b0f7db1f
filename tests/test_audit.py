from __future__ import annotations

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_tools.audit import Record, audit_records, id_extractor


def _inputs(n, partitions=2):
    return [Record(i % partitions, i // partitions, f"k{i % 4}".encode(), str(i)) for i in range(n)]


def _copy(recs, out_partitions=3):
    out, offsets = [], [0] * out_partitions
    for r in recs:
        p = int(r.key[1:]) % out_partitions
        out.append(Record(p, offsets[p], r.key, r.id))
        offsets[p] += 1
    return out


def test_exact_copy_passes():
    inputs = _inputs(100)
    report = audit_records(inputs, _copy(inputs))
    assert report.ok and report.records_in == report.records_out == report.unique_out == 100


def test_duplicates_losses_and_unexpected_are_counted():
    inputs = _inputs(20)
    out = _copy(inputs[:18] + inputs[3:5])  # loses two, duplicates two
    out.append(Record(0, 999, b"k0", "nope"))
    report = audit_records(inputs, out)
    assert (report.duplicates, report.losses, report.unexpected) == (2, 2, 1)
    assert not report.ok


def test_losses_are_told_as_runs_of_input_offsets():
    inputs = _inputs(40)  # ids i at partition i % 2, offset i // 2
    kept = [r for r in inputs if not (20 <= int(r.id) < 30 or r.id == "35")]
    report = audit_records(inputs, _copy(kept))
    assert report.losses == 11
    assert report.examples["losses by input"] == "p0@10-14, p1@10-14, p1@17"


def test_order_violation_within_a_key_is_found():
    inputs = _inputs(40)
    out = _copy(inputs)
    # swap two records of the same key in the same output partition
    same = [i for i, r in enumerate(out) if r.key == b"k1"]
    a, b = same[1], same[3]
    out[a], out[b] = (Record(out[a].partition, out[a].offset, out[b].key, out[b].id),
                      Record(out[b].partition, out[b].offset, out[a].key, out[a].id))
    report = audit_records(inputs, out)
    assert report.order_violations >= 1 and report.duplicates == 0 and report.losses == 0


class _Msg:
    def __init__(self, key=None, value=None, headers=None):
        self._k, self._v, self._h = key, value, headers

    def key(self):
        return self._k

    def value(self):
        return self._v

    def headers(self):
        return self._h


def test_id_conventions():
    assert id_extractor()(_Msg(value=b"42|HELLO")) == "42"
    assert id_extractor()(_Msg(value=None)) is None
    assert id_extractor("key")(_Msg(key=b"7")) == "7"
    assert id_extractor("header:id")(_Msg(headers=[("x", b"1"), ("id", b"9")])) == "9"
    with pytest.raises(ConfigError, match="id_from"):
        id_extractor("offset")
