"""Exactly-once on a real Spark standalone cluster (one master, two workers) whose
executors are SIGKILLed while the pipeline runs.

The pipeline (kafka_eos_tools/demo/job.py) is submitted with spark-submit --py-files and
the package as a zip; driver and executors run a Python that cannot import the source
tree (standalone.executor_python), so the job can only work from the shipped zip. The
master relaunches killed executors and Spark retries their tasks; after a clean stop
and a final --available-now run, the output is audited.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from integration.standalone import StandaloneCluster, executor_python, spark_env, spark_submit, tail
from integration.test_registration import REPO, _package_zip
from kafka_eos_tools.audit import audit
from kafka_eos_tools.demo import processes
from kafka_eos_tools.demo.chaos import InputFeeder, TailingReader, create_topics

RESULTS = Path(os.environ.get("KAFKA_EOS_RESULTS_DIR", ".kafka-eos/results"))
# The least input (20 batches); more is fed while the bounces go on (InputFeeder), so
# each bounce finds a busy query; the final run drains the rest.
RECORDS = 40_000
MAX_OFFSETS = 2_000
# What happens, in order, each a moment after the previous one's output recovered:
# "executor" SIGKILLs an executor JVM with its Python workers, "python-workers" only the
# Python workers of one executor (its tasks fail, the executor stays).
BOUNCES = ("executor", "python-workers", "executor", "executor")
SEED = 20261121
STEP_TIMEOUT = 120.0  # for each wait: first output, output after a kill
# The final run starts a driver and two executors and runs about ten batches: ~35 s
# idle, measured up to 92 s with other test suites loading the 2 cores.
DRAIN_TIMEOUT = 180.0


@pytest.fixture
def cluster(tmp_path):
    """Stopped (by pid) whatever happened; the test starts it, so a cluster that does not
    start fails the test with the daemons' log tails (never a skip)."""
    spark = StandaloneCluster(tmp_path / "spark")
    try:
        yield spark
    finally:
        spark.stop()


class Submitted:
    """One spark-submit of the pipeline to the cluster, and its log."""

    def __init__(self, cluster: StandaloneCluster, submit: list[str], args: list[str], log: Path) -> None:
        self.cluster, self.log = cluster, log
        self.proc = processes.start([*submit, *args], log, spark_env(cluster.workdir))

    def check_running(self) -> None:
        if self.proc.poll() is not None:
            pytest.fail(f"the driver exited (code {self.proc.returncode}):\n{tail(self.log)}\n"
                        f"{self.cluster.log_tails()}")

    def stop_cleanly(self, timeout: float = 60.0) -> None:
        """SIGTERM to job.py's Python, which stops the query in order (a SIGTERM to the
        spark-submit JVM would tear the SparkContext down under the query instead)."""
        for pid in processes.descendants(self.proc.pid):
            try:
                if b"job.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    processes.signal_quietly(pid, signal.SIGTERM)
            except OSError:
                pass
        self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            processes.kill_tree(self.proc.pid)
            pytest.fail(f"the driver did not finish within {timeout:.0f}s:\n{tail(self.log)}")


def wait_for_growth(tail_reader: TailingReader, base: int, driver: Submitted, what: str,
                    feeder: InputFeeder) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while len(tail_reader.ids) <= base:
        driver.check_running()
        # The feeder keeps the input ahead while it runs; stopped, and all it wrote seen,
        # the input has run out.
        if not feeder.is_alive() and len(tail_reader.ids) >= feeder.fed:
            pytest.fail(f"the input ran out before {what} (feeder error: {feeder.error}): the kills must land "
                        "mid-run")
        if time.monotonic() > deadline:
            pytest.fail(f"no new output within {STEP_TIMEOUT:.0f}s {what}:\n{tail(driver.log)}")
        time.sleep(0.2)


def bounce(cluster: StandaloneCluster, kind: str, rng: random.Random) -> int:
    """Do one bounce; returns the number of processes killed."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while not cluster.executors():  # both may be relaunching after the previous kill
        if time.monotonic() > deadline:
            pytest.fail(f"no executor running for {STEP_TIMEOUT:.0f}s:\n{cluster.log_tails()}")
        time.sleep(0.2)
    executor = rng.choice(sorted(cluster.executors()))
    if kind == "executor":
        return len(processes.kill_tree(executor))
    workers = [pid for pid in processes.descendants(executor) if processes.is_python_worker(pid)]
    for pid in workers:
        processes.signal_quietly(pid, signal.SIGKILL)
    return len(workers)


def _record(name: str, payload: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "cluster.jsonl").open("a") as fh:
        fh.write(json.dumps({"scenario": name, **payload}) + "\n")


def test_exactly_once_on_a_standalone_cluster_with_executor_kills(kafka, cluster, tmp_path):
    started = time.monotonic()
    cluster.start()
    rng = random.Random(SEED)
    run_id = uuid.uuid4().hex[:8]
    source, sink = f"cluster-in-{run_id}", f"cluster-out-{run_id}"
    create_topics(kafka.bootstrap, {source: 2, sink: 3}, kafka.replication())
    args = ["--bootstrap", kafka.bootstrap, "--input", source, "--output", sink,
            "--checkpoint", str(tmp_path / "checkpoint"), "--prefix", f"cluster-{run_id}",
            "--max-offsets", str(MAX_OFFSETS)]
    reader = TailingReader(kafka.bootstrap, sink)
    reader.start()
    # Input keeps coming while the kills go on, so every kill lands on a busy query.
    feeder = InputFeeder(kafka.bootstrap, source, RECORDS, 3 * MAX_OFFSETS, lambda: len(reader.ids))
    feeder.start()
    # Driver and executors alike run a Python that only finds kafka_eos_ds in the zip.
    python = executor_python(tmp_path / "python")
    submit = [spark_submit(), "--master", cluster.url, "--py-files", str(_package_zip(tmp_path)),
              "--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1",
              "--conf", "spark.cores.max=2", "--conf", "spark.driver.host=127.0.0.1",
              "--conf", f"spark.pyspark.python={python}", "--conf", f"spark.pyspark.driver.python={python}",
              str(REPO / "kafka_eos_tools" / "demo" / "job.py")]
    kills = {"executor": 0, "python-workers": 0}
    processes_killed = 0  # JVMs and Python workers
    drivers: list[Submitted] = []
    try:
        stream = Submitted(cluster, submit, args, tmp_path / "submit-stream.log")
        drivers.append(stream)
        wait_for_growth(reader, 0, stream, "the first output", feeder)
        for kind in BOUNCES:
            moment = time.monotonic() + rng.uniform(1.0, 4.0)
            while time.monotonic() < moment:
                stream.check_running()
                time.sleep(0.2)
            seen_at_kill = len(reader.ids)
            processes_killed += bounce(cluster, kind, rng)
            kills[kind] += 1
            wait_for_growth(reader, seen_at_kill, stream, f"after kill {sum(kills.values())} ({kind})", feeder)
        grown_after_kills = len(reader.ids) - seen_at_kill
        fed = feeder.finish()
        stream.stop_cleanly()
        drain = Submitted(cluster, submit, [*args, "--available-now"], tmp_path / "submit-drain.log")
        drivers.append(drain)
        assert drain.wait(DRAIN_TIMEOUT) == 0, tail(drain.log)
        report = audit({"bootstrap.servers": kafka.bootstrap}, source, sink)
        time.sleep(2.0)  # let the tailing reader catch up before it stops
    finally:
        feeder.finishing.set()
        for driver in drivers:  # a failed test leaves no driver behind
            if driver.proc.poll() is None:
                processes.kill_tree(driver.proc.pid)
        reader.stopping.set()
        reader.join(10)
    seconds = round(time.monotonic() - started, 1)
    figures = {"records_in": report.records_in, "records_out": report.records_out,
               "duplicates": report.duplicates, "losses": report.losses, "unexpected": report.unexpected,
               "order_violations": report.order_violations, "tail_duplicates": reader.duplicates,
               "executor_kills": kills["executor"], "python_worker_kills": kills["python-workers"],
               "processes_killed": processes_killed,
               "executors_launched": len(cluster.executor_dirs()), "seconds": seconds}
    _record("standalone 2 workers: executor kills", figures)
    print("standalone cluster: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert report.records_in == fed >= RECORDS, report.table()
    assert report.duplicates == 0, report.table()
    assert report.losses == 0, report.table()
    assert report.unexpected == 0, report.table()
    assert reader.duplicates == 0
    assert kills["executor"] >= 3
    # The kills landed mid-run: the streaming run wrote more after the last one.
    assert grown_after_kills > 0
    # Two apps (stream, drain), each two executors, plus one relaunch per executor kill.
    assert len(cluster.executor_dirs()) >= 4 + kills["executor"]
