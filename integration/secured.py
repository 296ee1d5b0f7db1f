"""Secured embedded clusters for tests: start one, lay out a pipeline's topics and ACLs,
run the pipeline in a driver process whose whole output is kept, look for secrets.

The pipeline runs as ``python -m integration.secured_pipeline SPEC.json`` so that
everything the driver prints (Spark's log4j lines, py4j, librdkafka, the Python workers'
stderr, the ``kafka_eos_ds`` loggers at DEBUG, the query's exception and progress) lands in
one file a test can search for passwords.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kafka_eos_tools.broker.cluster import EmbeddedKafka
from kafka_eos_tools.broker.security import USERS
from kafka_eos_tools.topics import create_topic, unique_name

COMMIT_LOG = "_kafka_eos_commit_log"
# The sink reads its commit log with a consumer of this group (assigned partitions, no
# subscription), which librdkafka still looks the coordinator up for: a user needs READ on it.

# Imported first by every Python process of a driver run (the driver and Spark's Python
# workers, where the sink's driver side and the tasks run), so the kafka_eos_ds loggers
# print at DEBUG into the run's captured output.
_SITECUSTOMIZE = """import logging, sys
_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"))
_log = logging.getLogger("kafka_eos_ds")
_log.addHandler(_handler)
_log.setLevel(logging.DEBUG)
"""


def start_secured(directory: Path, security: str, acls: bool = False) -> Iterator[EmbeddedKafka]:
    """A started 1-node cluster (for a module fixture); stopped when the generator ends."""
    cluster = EmbeddedKafka(directory, brokers=1, security=security, acls=acls)
    started = time.monotonic()
    try:
        cluster.start(timeout=120)
        print(f"secured cluster {security} (acls={acls}) ready in {time.monotonic() - started:.1f}s")
        # The sink's decision log, created by the admin as the sink would create it, so
        # users need no CREATE right.
        create_topic(cluster.bootstrap, COMMIT_LOG, 1, 1, {"cleanup.policy": "compact", "min.insync.replicas": "1"},
                     client=cluster.admin_config())
        yield cluster
    finally:
        cluster.stop()


@dataclass
class Pipeline:
    input: str
    output: str
    group: str
    prefix: str


def new_pipeline(cluster: EmbeddedKafka, records: int, partitions: int = 2) -> Pipeline:
    """Fresh input (seeded with ``records`` ids) and output topics, made by the admin."""
    from confluent_kafka import Producer

    from kafka_eos_tools.demo.chaos import _produce_ids

    admin = cluster.admin_config()
    pipe = Pipeline(create_topic(cluster.bootstrap, unique_name("in"), partitions, 1, client=admin),
                    create_topic(cluster.bootstrap, unique_name("out"), partitions, 1, client=admin),
                    unique_name("group"), unique_name("txn"))
    producer = Producer({**admin, "linger.ms": 5})
    _produce_ids(producer, pipe.input, range(records), 8)
    assert producer.flush(60) == 0
    return pipe


def grant(cluster: EmbeddedKafka, user: str, pipe: Pipeline, *, transactional_ids: bool = True,
          write_output: bool = True) -> None:
    """The ACLs ``user`` needs to run ``pipe``, less what a test leaves out."""
    cluster.create_acls(user, read_topics=[pipe.input, COMMIT_LOG],
                        write_topics=[COMMIT_LOG] + ([pipe.output] if write_output else []),
                        # Without WRITE the output stays visible: the denial is then about writing.
                        describe_topics=[] if write_output else [pipe.output],
                        groups=[pipe.group], transactional_id_prefix=pipe.prefix if transactional_ids else None)


@dataclass
class DriverRun:
    returncode: int
    log: str  # everything the driver process printed
    result: dict  # {"exception": str|None, "progress": [...]}


def run_driver(pipe: Pipeline, options: dict, work: Path, sink_format: str = "kafka_eos",
               timeout: float = 240.0, sink_options: dict | None = None) -> DriverRun:
    """Run the pipeline once with ``options`` (a Spark option map) on reader and writer,
    and ``sink_options`` on the writer only."""
    work.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the options' secrets
    with os.fdopen(fd, "w") as fh:
        json.dump({"format": sink_format, "options": options, "input": pipe.input, "output": pipe.output,
                   "group": pipe.group, "prefix": pipe.prefix, "checkpoint": str(work / "checkpoint"),
                   "result": str(work / "result.json"), "timeout": timeout - 60,
                   "sink_options": sink_options or {}}, fh)
    site = work / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), repo, os.environ.get("PYTHONPATH", "")])}
    log_file = work / "driver.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "integration.secured_pipeline", str(spec)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                cwd=repo, env=env)
        try:
            rc: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the JVM and Python workers with it
            except ProcessLookupError:
                pass
            proc.wait(30)
    log = log_file.read_text(errors="replace")
    if rc is None:
        raise TimeoutError(f"the pipeline driver did not finish in {timeout}s; log {log_file}:\n{log[-3000:]}")
    result_path = work / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {"exception": None, "progress": []}
    return DriverRun(rc, log, result)


def secrets_of(cluster: EmbeddedKafka) -> dict[str, str]:
    """Every generated secret of the cluster, by name."""
    assert cluster.material is not None
    names = [*USERS, "broker", "truststore"]
    return {name: cluster.material.password(name) for name in names}


def leaked(text: str, cluster: EmbeddedKafka) -> list[str]:
    """The names of the secrets found in ``text`` (never the secrets)."""
    return [name for name, secret in secrets_of(cluster).items() if secret in text]
