"""Running the exactly-once pipeline as a driver subprocess, with a fault injected.

The pipeline is :mod:`kafka_eos_ds.demo.job` (read IN with ``format("kafka_eos")``,
upper-case the value, write OUT with ``format("kafka_eos")``), in its own session so a
``driver-*`` fault's process-group kill takes the JVM and every Python worker with it,
and nothing of a run survives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from kafka_eos_ds.demo.chaos import seed_input


@dataclass
class Run:
    returncode: int
    log: str
    seconds: float

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL


def seed(bootstrap: str, topic: str, records: int, keys: int = 16) -> None:
    seed_input(bootstrap, topic, records, keys)


def run_pipeline(bootstrap: str, input_topic: str, output_topic: str, checkpoint: str, prefix: str, *,
                 fault: Optional[str] = None, sink_options: Sequence[str] = (), max_offsets: int = 150,
                 timeout: float = 150.0, log_dir: Optional[Path] = None) -> Run:
    """One driver run with ``availableNow`` (drain IN, then exit); killed after ``timeout``."""
    cmd = [sys.executable, "-m", "kafka_eos_ds.demo.job", "--bootstrap", bootstrap, "--input", input_topic,
           "--output", output_topic, "--checkpoint", checkpoint, "--prefix", prefix,
           "--max-offsets", str(max_offsets), "--available-now",
           # local[2,3]: a failed task is retried (attempt 1, 2), as on a cluster.
           "--master", "local[2,3]"]
    for option in sink_options:
        cmd += ["--sink-option", option]
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_EOS_FAULT"}
    if fault:
        env["KAFKA_EOS_FAULT"] = fault
    log_path = Path(log_dir or checkpoint + "-logs")
    log_path.mkdir(parents=True, exist_ok=True)
    log_file = log_path / f"run-{int(time.time() * 1000)}.log"
    started = time.monotonic()
    with open(log_file, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
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
