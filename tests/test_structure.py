"""The package boundaries a maintainer relies on (docs/dev/behind-the-scenes.md)."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys

import pytest

import kafka_eos_ds


def _modules(package) -> list[str]:
    return [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]


def test_the_product_never_imports_the_tooling():
    code = ("import importlib, sys\n"
            f"for name in {_modules(kafka_eos_ds)!r}:\n"
            "    importlib.import_module(name)\n"
            "leaked = sorted(m for m in sys.modules if m.startswith('kafka_eos_tools'))\n"
            "assert not leaked, leaked\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_EOS_FAULT")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_twophase_knows_no_kafka():
    import importlib
    import re

    from kafka_eos_ds import twophase

    kafka = re.compile(r"^\s*(import|from) (confluent_kafka|kafka\b|kafka_eos_ds\.kafka(_sink)?\b)|KafkaClientError",
                       re.M)
    for name in [twophase.__name__, *_modules(twophase)]:
        with open(importlib.import_module(name).__file__) as f:
            found = kafka.search(f.read())
        assert found is None, f"{name} mentions {found.group(0)}"


def test_neither_sink_package_imports_the_other():
    import importlib
    import re

    from kafka_eos_ds import kafka_sink, table_sink

    for package, other in ((kafka_sink, "table_sink"), (table_sink, "kafka_sink")):
        imports = re.compile(rf"^\s*(import|from) kafka_eos_ds\.{other}\b", re.M)
        for name in [package.__name__, *_modules(package)]:
            with open(importlib.import_module(name).__file__) as f:
                found = imports.search(f.read())
            assert found is None, f"{name} imports the other sink: {found.group(0)}"


class _RecordingSink:
    """A sink whose steps only record how the writers call them."""

    def __init__(self):
        from kafka_eos_ds.twophase.runtime import DEFAULT

        self.calls = []
        self.runtime = DEFAULT

    @property
    def message_type(self):
        from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage

        return KafkaCommitMessage

    def prepare(self, spec):
        from kafka_eos_ds.twophase import DoneMark

        self.calls.append(("prepare", spec.streaming))
        return DoneMark("q", 3)

    def commit(self, write, participants):
        self.calls.append(("commit", write, len(participants)))

    def abort(self, write, participants, spec):
        self.calls.append(("abort", write, len(participants)))


def _message(write, partition=0):
    from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage

    return KafkaCommitMessage(write, partition, 0, 1, write.family, f"t-{partition}", 7, 1)


def test_pickling_a_writer_recovers_once_and_its_tasks_get_the_mark():
    """Spark pickles the writer only on the planner, once per batch, for the tasks: that is
    where recovery runs (docs/dev/decisions.md); never again, however often it is pickled."""
    import pickle

    from kafka_eos_ds.twophase import DoneMark
    from kafka_eos_ds.twophase.writers import TwoPhaseStreamWriter

    sink = _RecordingSink()
    writer = TwoPhaseStreamWriter(sink)
    copies = [pickle.loads(pickle.dumps(writer)) for _ in range(3)]
    assert sink.calls == [("prepare", True)]
    assert all(c.mark == DoneMark("q", 3) for c in copies)


def test_commit_runs_in_a_fresh_writer_and_never_recovers_its_own_batch():
    from kafka_eos_ds.twophase import Kind, WriteId
    from kafka_eos_ds.twophase.writers import TwoPhaseStreamWriter

    sink = _RecordingSink()
    write = WriteId(Kind.STREAM, "q", 4)
    TwoPhaseStreamWriter(sink).commit([_message(write), None, _message(write, 1)], 4)
    assert sink.calls == [("commit", write, 3)]


def test_a_batch_write_commits_under_the_identity_its_tasks_report():
    """Inside foreachBatch the tasks see the stream's micro-batch: the driver commits under
    it, never under a batch job's own default (which committed only the first write)."""
    from kafka_eos_ds.errors import TransactionError
    from kafka_eos_ds.twophase import Kind, WriteId
    from kafka_eos_ds.twophase.writers import TwoPhaseBatchWriter, TwoPhaseStreamWriter

    sink = _RecordingSink()
    inside = WriteId(Kind.FOREACH, "q", 7, run="r1", job="j")
    TwoPhaseBatchWriter(sink, {}).commit([_message(inside), _message(inside, 1)])
    assert sink.calls == [("commit", inside, 2)]
    with pytest.raises(TransactionError, match="different identities"):
        TwoPhaseBatchWriter(sink, {}).commit([_message(inside), _message(WriteId(Kind.JOB, "j", 0, job="j"))])
    with pytest.raises(TransactionError, match="Spark commits batch 5 but its tasks wrote batch 4"):
        TwoPhaseStreamWriter(sink).commit([_message(WriteId(Kind.STREAM, "q", 4))], 5)


def test_the_product_command_is_the_operators_and_the_checkout_adds_the_tooling(capsys):
    from kafka_eos_ds import cli as product
    from kafka_eos_tools import cli as tooling

    def commands(main):
        with pytest.raises(SystemExit):
            main(["--help"])
        out = capsys.readouterr().out
        return {name for name in ("broker", "demo", "audit", "transactions") if f"    {name}" in out}

    assert commands(product.main) == {"transactions"}
    assert commands(tooling.main) == {"broker", "demo", "audit", "transactions"}


def test_every_troubleshooting_section_an_error_names_exists():
    """An error is one sentence naming the case and the options, then the section of
    docs/troubleshooting.md with the causes and the way out: that section must exist."""
    import ast
    import re
    from pathlib import Path

    root = Path(kafka_eos_ds.__file__).parent
    headings = {line[3:].strip().replace("`", "")
                for line in (root.parent / "docs" / "troubleshooting.md").read_text().splitlines()
                if line.startswith("## ")}
    named: dict[str, str] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):  # an f-string: its literal parts, with {} for the values
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            for section in re.findall(r'troubleshooting\.md, "([^"]+)"', text):
                named[section] = f"{path.relative_to(root)}:{node.lineno}"
    assert len(named) >= 7, named  # the scan still finds the product's references
    assert {s: where for s, where in named.items() if s not in headings} == {}
