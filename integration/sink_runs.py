"""Running the exactly-once pipeline as a driver subprocess, with a fault injected.

The pipeline is :mod:`kafka_eos_tools.demo.job` (read IN with ``format("kafka_eos")``,
upper-case the value, write OUT with ``format("kafka_eos")``), in its own session so a
``driver-*`` fault's process-group kill takes the JVM and every Python worker with it,
and nothing of a run survives it. Given the session's warm driver
(:mod:`integration.warm_driver`), a run that no fault can kill runs there instead, saving
a JVM and a SparkSession start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from integration.warm_driver import WarmDriver, runs_warm
from kafka_eos_tools import faults, jvm_archive
from kafka_eos_tools.demo.chaos import seed_input

# A driver process of its own serves one run of tens of seconds: the JIT's top tier (C2)
# and G1's concurrent work cost it more CPU than they save (measured by hand on a 4-batch
# run: about 30% less CPU with these). The warm driver keeps the defaults.
SHORT_DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass
class Run:
    returncode: int
    log: str
    seconds: float
    warm: bool = False  # ran in the warm driver, not in a driver process of its own

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def assert_crashed(run: Run) -> None:
    """The injected driver fault fired: the run ended by SIGKILL."""
    assert run.killed, f"the fault did not fire (exit {run.returncode}):\n{run.log[-3000:]}"


def task_ids(conf: Mapping[str, str], prefix: str, partition: int, attempt: int,
             state: str | None = None) -> list[str]:
    """The ids a stream's task (``partition``, ``attempt``) used, one per run of the query
    (its ids carry the run: ``{prefix}:s{run}-{partition}-{attempt}``), optionally only
    those in ``state`` (e.g. "Ongoing")."""
    from kafka_eos_ds.kafka_sink import list_transactions

    return sorted(t.transactional_id for t in list_transactions(conf, prefix)
                  if t.family.startswith("s") and (t.partition, t.attempt) == (partition, attempt)
                  and (state is None or t.state == state))


def earlier_run_family() -> str:
    """The family of :func:`earlier_run_id`: a run of the query before the one under test."""
    from kafka_eos_ds.twophase.identity import token

    return "s" + token("an earlier run")


def earlier_run_id(prefix: str, partition: int, attempt: int) -> str:
    """The id task (``partition``, ``attempt``) had in an earlier run of the query (not
    one of the run under test): what a zombie of that run holds."""
    from kafka_eos_ds.kafka_sink import transactional_ids

    return transactional_ids.build(prefix, partition, attempt, earlier_run_family())


def seed(bootstrap: str, topic: str, records: int, keys: int = 16, start: int = 0) -> None:
    seed_input(bootstrap, topic, records, keys, start)


def run_pipeline(bootstrap: str, input_topic: str, output_topic: str, checkpoint: str, prefix: str, *,
                 fault: str | None = None, sink_options: Sequence[str] = (), max_offsets: int = 150,
                 timeout: float = 150.0, log_dir: Path | None = None, sink_format: str = "kafka_eos",
                 gate: str | None = None, job_args: Sequence[str] = (),
                 warm: WarmDriver | None = None, env: Mapping[str, str] | None = None) -> Run:
    """One driver run with ``availableNow`` (drain IN, then exit); killed after ``timeout``.

    ``gate``: the file a ``gate`` fault creates and waits on (:mod:`kafka_eos_tools.faults`);
    ``job_args``: more arguments of :mod:`kafka_eos_tools.demo.job` (e.g. ``--foreach-batch``);
    ``warm``: the warm driver, used when :func:`~integration.warm_driver.runs_warm` allows;
    ``env``: more environment for the driver (credentials; such a run never runs warm).

    ``sink_format="kafka_eos_file"`` writes files instead (pass ``path=DIR`` in
    ``sink_options``; the output topic is then unused)."""
    args = ["--bootstrap", bootstrap, "--input", input_topic, "--output", output_topic, "--checkpoint", checkpoint,
            "--prefix", prefix, "--max-offsets", str(max_offsets), "--available-now",
            # local[2,3]: a failed task is retried (attempt 1, 2), as on a cluster.
            "--master", "local[2,3]", "--sink-format", sink_format]
    for option in sink_options:
        args += ["--sink-option", option]
    args += list(job_args)
    log_path = Path(log_dir or checkpoint + "-logs")
    log_path.mkdir(parents=True, exist_ok=True)
    stamp = int(time.time() * 1000)
    log_file = log_path / f"run-{stamp}.log"
    counts = str(log_path / f"fault-counts-{stamp}")
    started = time.monotonic()
    if warm is not None and env is None and runs_warm(fault, job_args):
        rc, text = warm.run(args, fault, gate, counts, timeout)
        log_file.write_text(text)
        return Run(rc, text, time.monotonic() - started, warm=True)
    extra, env = env or {}, {k: v for k, v in os.environ.items() if k not in faults.environment("", "", "")}
    env.update(extra)
    if fault:
        env.update(faults.environment(fault, gate, counts))
    java_options = jvm_archive.java_options(SHORT_DRIVER_JAVA_OPTIONS)
    with open(log_file, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "kafka_eos_tools.demo.job", *args,
                                 f"--driver-java-options={java_options}"], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]))
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            # Whatever the outcome, nothing of this run may outlive it (JVM, Python workers).
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(30)
    text = log_file.read_text(errors="replace")
    if rc is None:
        raise TimeoutError(f"pipeline run did not finish in {timeout}s; log {log_file}:\n{text[-3000:]}")
    return Run(rc, text, time.monotonic() - started)


@dataclass
class FileAudit:
    """What a directory written by ``format("kafka_eos_file")`` holds, by record id."""

    expected: int
    ids: list
    leftovers: list  # names still staged (_kafka_eos/<writer>/in-progress or .../pending)

    @property
    def duplicates(self) -> list:
        from collections import Counter

        return sorted(i for i, n in Counter(self.ids).items() if n > 1)

    @property
    def losses(self) -> list:
        return sorted(set(range(self.expected)) - set(self.ids))

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.losses and len(self.ids) == self.expected

    def __str__(self) -> str:
        return (f"rows={len(self.ids)} expected={self.expected} duplicates={self.duplicates[:10]} "
                f"losses={self.losses[:10]} leftovers={self.leftovers}")


def audit_files(directory: str, expected: int, id_column: str = "value", separator: str = "|") -> FileAudit:
    """Read the final files as a reader of the directory would (pyarrow skips ``_*`` names)
    and collect the record ids (the value's prefix before ``separator``)."""
    import pyarrow.dataset as ds

    root = Path(directory)
    ids: list = []
    if any(root.glob("part-*")):
        for value in ds.dataset(str(root), format="parquet").to_table(columns=[id_column]).column(0).to_pylist():
            text = value.decode() if isinstance(value, bytes) else value
            ids.append(int(text.split(separator, 1)[0]))
    leftovers = sorted(p.name for sub in ("in-progress", "pending")
                       for p in (root / "_kafka_eos").glob(f"*/{sub}/*"))
    return FileAudit(expected, ids, leftovers)
