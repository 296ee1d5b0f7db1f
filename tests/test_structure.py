"""The package boundaries a maintainer relies on (docs/behind-the-scenes.md)."""

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

    kafka = re.compile(r"^\s*(import|from) (confluent_kafka|kafka\b|kafka_eos_ds\.(kafka|sink)\b)|KafkaClientError",
                       re.M)
    for name in [twophase.__name__, *_modules(twophase)]:
        with open(importlib.import_module(name).__file__) as f:
            found = kafka.search(f.read())
        assert found is None, f"{name} mentions {found.group(0)}"


@pytest.mark.parametrize("writer", [
    "kafka_eos_ds.sink.writers.KafkaStreamWriter", "kafka_eos_ds.sink.writers.KafkaBatchWriter",
    "kafka_eos_ds.filesink.writers.FileStreamWriter", "kafka_eos_ds.filesink.writers.FileBatchWriter",
])
def test_spark_writers_define_their_entry_points_themselves(writer):
    module, _, name = writer.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    for method in ("write", "commit", "abort", "prepare_for_tasks", "__getstate__"):
        assert method in vars(cls), f"{name}.{method} is inherited"


def test_the_console_script_has_the_operator_and_the_tooling_commands(capsys):
    from kafka_eos_tools import cli

    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("broker", "demo", "audit", "transactions"):
        assert command in out
