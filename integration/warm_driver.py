"""One long-lived driver process for the pipeline runs that no fault can kill.

A pipeline run in a driver process of its own (:func:`integration.sink_runs.run_pipeline`)
pays a JVM start and a SparkSession start each time. A run whose fault cannot end the driver
(:func:`kafka_eos_tools.faults.kills_driver`) runs here instead: the same SparkSession as
:mod:`kafka_eos_tools.demo.job` builds (``session``, master ``local[2,3]``), the same query
(``start``), waited for the same way (``run_until_done``). A restart from a checkpoint is a
new streaming query in the same session: a new writer, recovery in the planner. What the
sinks keep lives in Kafka, the output directory and the checkpoint, not in the JVM, and the
crash points run in Python workers, which read the run's faults from a file
(:func:`kafka_eos_tools.faults.file_environment`).

The channel: the process answers ``{"ready": true}`` once its session is up, then reads one
JSON request a line on stdin (``argv`` of the job, ``fault``, ``gate``, ``counts``) and
answers each with ``{"returncode": 0|1}`` on its original stdout. Everything the JVM, its
Python workers and the run print goes to one log file; a run's log is the part written
between its request and its answer. Between runs no query may be active and no job running;
a run that leaves one behind ends the process, and so does a run over its time limit or a
process that died: the next run starts a new one, and the run at fault raises.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Sequence

from kafka_eos_tools import faults, jvm_archive
from kafka_eos_tools.demo import processes

MASTER = "local[2,3]"  # as run_pipeline passes: a failed task is retried, as on a cluster
START_TIMEOUT_S = 240.0
SETTLE_TIMEOUT_S = 30.0


def runs_warm(fault: str | None, job_args: Sequence[str] = ()) -> bool:
    """Whether a run may use the warm driver: none of its faults can end the driver process
    (:func:`kafka_eos_tools.faults.kills_driver`; such a run needs a driver of its own, whose
    crash takes its JVM and every Python worker with it), and it asks for no master or jars
    other than the warm session's."""
    own_session = any(arg.split("=", 1)[0] in ("--master", "--jars") for arg in job_args)
    return not own_session and not faults.kills_driver(fault)


class WarmDriverError(RuntimeError):
    """The warm driver died, hung or left a run behind; it has been stopped."""


class WarmDriver:
    """The client: starts the process on first use, again after any failure."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.starts = 0
        self.runs = 0

    def run(self, argv: Sequence[str], fault: str | None, gate: str | None, counts: str | None,
            timeout: float) -> tuple[int, str]:
        """Run the job with ``argv`` (what ``python -m kafka_eos_tools.demo.job`` would be
        given); returns its exit code and log. Raises :class:`TimeoutError` after
        ``timeout`` s, :class:`WarmDriverError` when the process died or leaked the run."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None and self.log_path is not None
        offset = self.log_path.stat().st_size
        finished = False
        try:
            request = {"argv": list(argv), "fault": fault, "gate": gate, "counts": counts}
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            reply = self._reply(timeout, "run")
            finished = "returncode" in reply
        finally:
            if not finished:  # a timeout, a dead process, or the test's own time limit
                self.stop()
        self.runs += 1
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        if reply.get("leak"):
            self.stop()
            raise WarmDriverError(f"the run left {reply['leak']} behind; log:\n{text[-3000:]}")
        return int(reply["returncode"]), text

    def _start(self) -> None:
        self.starts += 1
        self.log_path = self.workdir / f"driver-{self.starts}.log"
        fault_file = str(self.workdir / f"faults-{self.starts}.json")
        faults.write_file(fault_file, None)
        env = {k: v for k, v in os.environ.items()
               if k not in faults.environment("", "", "") and k != faults.FILE_ENV}
        env.update(faults.file_environment(fault_file))
        env["PYSPARK_PYTHON"] = sys.executable
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "integration.warm_driver"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, env=env, start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]))
        try:
            self._reply(START_TIMEOUT_S, "start")
        except BaseException:
            self.stop()
            raise

    def _reply(self, timeout: float, what: str) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        fd, data = self.proc.stdout.fileno(), b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"warm driver: no answer to {what} within {timeout:.0f}s; "
                                   f"log {self.log_path}:\n{self._log_tail()}")
            if select.select([fd], [], [], min(left, 1.0))[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise WarmDriverError(f"warm driver died ({what}, exit {self.proc.poll()}); "
                                          f"log {self.log_path}:\n{self._log_tail()}")
                data += chunk
        return json.loads(data)

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path else ""

    def stop(self) -> None:
        """End the process and everything it started (JVM, Python worker daemons)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        victims = processes.kill_tree(proc.pid)
        proc.wait(30)
        processes.wait_gone(victims)
        # The pipes are ours to close: left to the garbage collector they raise a
        # ResourceWarning in whatever test runs then (an error in a unit test).
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()

    def close(self) -> None:
        """A clean stop (the session stops); a kill if that takes over a minute."""
        if self.proc is None:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
            self.proc.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.stop()


# -- the process ---------------------------------------------------------------------------

def serve() -> int:
    from kafka_eos_tools.demo import job

    # The original stdout carries the answers; everything printed from now on (the run's
    # own lines, the JVM's and its workers', which inherit these descriptors) goes to the log.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def answer(reply: dict) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps(reply) + "\n")
        answers.flush()

    fault_file = os.environ[faults.FILE_ENV]
    spark = job.session(MASTER, None, jvm_archive.java_options())
    answer({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        faults.write_file(fault_file, request["fault"], request["gate"], request["counts"])
        returncode = 0
        try:
            args = job.parse_args(request["argv"])
            if args.master != MASTER or args.jars:
                raise ValueError(f"the warm driver runs {MASTER} without --jars; this run needs its own driver")
            query, drain = job.start(spark, args)
            job.run_until_done(query, drain)
        except (Exception, SystemExit):
            # What the job's own process would print before exiting with 1.
            traceback.print_exc()
            returncode = 1
        finally:
            faults.write_file(fault_file, None)
        leak = settle(spark)
        answer({"returncode": returncode, "leak": leak})
        if leak:
            return 1
    spark.stop()
    return 0


def settle(spark) -> str | None:
    """Stop whatever the run left active, and wait until no Spark job runs (a failed
    query's cancelled tasks end shortly after it). What was left behind, or None."""
    # A query whose run_until_done saw it end can still be listed for a moment (a gate run
    # under load, docs/dev/testing.md run 17): only one still running was left behind.
    leak = [f"query {q.id}" for q in spark.streams.active if q.isActive]
    for query in spark.streams.active:
        query.stop()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.2)
    if tracker.getActiveJobsIds():
        leak.append(f"jobs {tracker.getActiveJobsIds()}")
    if spark.streams.active:
        leak.append("a query that would not stop")
    return ", ".join(leak) or None


if __name__ == "__main__":
    sys.exit(serve())
