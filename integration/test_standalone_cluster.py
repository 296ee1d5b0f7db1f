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
import re
import signal
import subprocess
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from integration.standalone import StandaloneCluster, executor_python, spark_env, spark_submit, tail
from integration.test_registration import REPO, _package_zip
from kafka_eos_ds.kafka_sink.transactions_tool import list_transactions
from kafka_eos_tools import faults
from kafka_eos_tools.audit import audit
from kafka_eos_tools.demo import processes
from kafka_eos_tools.demo.chaos import InputFeeder, TailingReader, create_topics, seed_input
from kafka_eos_tools.topics import end_offsets

# Each test starts its own cluster: 107-209 s measured, 3.5 minutes beside another cluster
# test; the default limit (pyproject.toml) leaves too little margin.
# Its own cluster: the gate runs it in its second lane (scripts/test.sh).
pytestmark = [pytest.mark.timeout(900), pytest.mark.second_lane]

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


# In the full profile: CI's cluster runs are the speculation and resubmitted-stage tests
# below, which kill an executor too.
@pytest.mark.full
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


# --- Spark's own retry machinery: speculative copies, a resubmitted writing stage ----------

RETRY_RECORDS = 6_000  # three batches of 2,000
RETRY_BATCH = 1  # the stalled writing stage of the stage-retry test
# A task of the writing stage that has run this long is the slowed one (the others take
# a second or two, several on a loaded machine).
SLOW_TASK_SECONDS = 4.0


def _package_zip_with_faults(dest: Path) -> Path:
    """The package zip plus the crash tests' fault hook, which executors load by name."""
    archive = _package_zip(dest)
    with zipfile.ZipFile(archive, "a") as zf:
        for name in ("__init__.py", "faults.py"):
            zf.write(REPO / "kafka_eos_tools" / name, f"kafka_eos_tools/{name}")
    return archive


def _retry_run(kafka, cluster: StandaloneCluster, tmp_path: Path, name: str, fault: str, conf: dict[str, str],
               extra_args: list[str]) -> tuple[Submitted, dict]:
    """Seed the input, start one --available-now run on the cluster with ``fault`` in the
    executors and Spark's event log on; returns the running driver and the run's names."""
    run_id = uuid.uuid4().hex[:8]
    names = {"source": f"{name}-in-{run_id}", "sink": f"{name}-out-{run_id}", "prefix": f"{name}-{run_id}",
             "events": tmp_path / "events"}
    create_topics(kafka.bootstrap, {names["source"]: 2, names["sink"]: 3}, kafka.replication())
    seed_input(kafka.bootstrap, names["source"], RETRY_RECORDS, keys=16)
    names["events"].mkdir()
    _await_group_coordinator(kafka.bootstrap, f"{names['prefix']}-source", names["source"])
    python = executor_python(tmp_path / "python")
    settings = {"spark.executor.memory": "512m", "spark.executor.cores": "1", "spark.cores.max": "2",
                "spark.driver.host": "127.0.0.1", "spark.pyspark.python": python,
                "spark.pyspark.driver.python": python,
                # The executors only: the driver's points are not the subject here.
                **{f"spark.executorEnv.{k}": v for k, v in faults.environment(fault).items()},
                # Spark's record of every stage and task attempt, read after the run.
                "spark.eventLog.enabled": "true", "spark.eventLog.dir": names["events"].as_uri(),
                "spark.eventLog.compress": "false", **conf}
    submit = [spark_submit(), "--master", cluster.url, "--py-files", str(_package_zip_with_faults(tmp_path)),
              *[arg for k, v in settings.items() for arg in ("--conf", f"{k}={v}")],
              str(REPO / "kafka_eos_tools" / "demo" / "job.py")]
    args = ["--bootstrap", kafka.bootstrap, "--input", names["source"], "--output", names["sink"],
            "--checkpoint", str(tmp_path / "checkpoint"), "--prefix", names["prefix"],
            "--max-offsets", "2000", "--available-now", *extra_args]
    return Submitted(cluster, submit, args, tmp_path / f"submit-{name}.log"), names


def _await_group_coordinator(bootstrap: str, group: str, topic: str, timeout: float = 60.0) -> None:
    """Wait until the source group's coordinator answers: on a fresh broker its offsets
    partition may still be loading, and the query's first offsets lookup fails then
    (NOT_COORDINATOR), which is not what these tests are about."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.committed([TopicPartition(topic, 0)], timeout=10)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
    finally:
        consumer.close()


def _events(directory: Path) -> list[dict]:
    """Every event of the run's event log (Spark 4 writes it as a directory of rolled
    files). Read while the run goes on, its last line may be incomplete: skipped."""
    events = []
    for log in sorted(p for p in directory.rglob("events_*") if p.is_file()):
        for line in log.read_text(errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return events


def _settled(kafka, names: dict) -> dict:
    """Audit the output and the transactions the run left: the figures every scenario asserts."""
    report = audit({"bootstrap.servers": kafka.bootstrap}, names["source"], names["sink"])
    conf = {"bootstrap.servers": kafka.bootstrap}
    return {"report": report, "open": list_transactions(conf, names["prefix"], open_only=True),
            "ids": [t.transactional_id for t in list_transactions(conf, names["prefix"])],
            "committed_end": end_offsets(kafka.bootstrap, names["sink"], "read_committed"),
            "high_watermark": end_offsets(kafka.bootstrap, names["sink"], "read_uncommitted")}


def _assert_exactly_once(settled: dict) -> None:
    report = settled["report"]
    assert report.records_in == RETRY_RECORDS, report.table()
    assert report.records_out == RETRY_RECORDS, report.table()
    assert report.duplicates == 0, report.table()
    assert report.losses == 0, report.table()
    assert report.unexpected == 0, report.table()
    # Nothing of the losing or killed attempts is left open to hold read_committed readers back.
    assert settled["open"] == []
    assert settled["committed_end"] == settled["high_watermark"]


# Which attempt of the stalled task wins, and the faults that make it so (after the
# pre-commit, so the loser holds an open transaction when Spark kills it):
# "copy": attempt 0 stalls for good, the speculative attempt 1 wins;
# "original": attempt 0 stalls long enough to be copied, the copy stalls for good.
# In the last batch (2): no later batch's recovery cleans up after the loser there.
SPECULATION_FAULTS = {
    "copy": "task-after-precommit@2#0!0:sleep60",
    "original": "task-after-precommit@2#0!0:sleep12,task-after-precommit@2#0!1:sleep60",
}


# CI's gate runs "original", the case only the post-commit fence handles (a losing
# attempt 0 is also fenced as a lower attempt of the winner); the full profile both.
@pytest.mark.parametrize("winner", [pytest.param("copy", marks=pytest.mark.full), "original"])
def test_speculative_copies_on_a_standalone_cluster_are_exactly_once(kafka, tmp_path, winner):
    """Spark's speculation for real: two workers on different loopback addresses (two
    hosts), attempt 0 of task 0 of a batch pre-commits and then stalls, Spark launches a
    speculative copy on the other host; the winner commits, the loser is killed with its
    transaction open. A losing attempt 0 is a lower attempt of the winner; a losing copy
    (attempt 1) is not, and only the driver's post-commit fence of every open id aborts it."""
    started = time.monotonic()
    loser = 0 if winner == "copy" else 1
    cluster = StandaloneCluster(tmp_path / "spark", hosts=("127.0.0.2", "127.0.0.3"))
    try:
        cluster.start()
        speculation = {"spark.speculation": "true", "spark.speculation.multiplier": "1.5",
                       "spark.speculation.quantile": "0.5", "spark.speculation.minTaskRuntime": "1s",
                       "spark.speculation.interval": "200ms",
                       # Judge a task by its run time alone: the stalled one has read all
                       # its records, so by its rate it would look efficient for a while.
                       "spark.speculation.efficiency.enabled": "false"}
        driver, names = _retry_run(kafka, cluster, tmp_path, "speculation", SPECULATION_FAULTS[winner],
                                   speculation, [])
        try:
            assert driver.wait(DRAIN_TIMEOUT) == 0, tail(driver.log)
        finally:
            if driver.proc.poll() is None:
                processes.kill_tree(driver.proc.pid)
    finally:
        cluster.stop()
    events = _events(names["events"])
    settled = _settled(kafka, names)
    starts = [e["Task Info"] for e in events if e["Event"] == "SparkListenerTaskStart"]
    speculative = [t for t in starts if t["Speculative"]]
    # The executor of the stalled attempt logs Spark's kill of it (the application may stop
    # before the killed attempt's end reaches the event log).
    loser_killed = [line for log in (tmp_path / "spark").glob("worker-*/app-*/*/stderr")
                    for line in log.read_text(errors="replace").splitlines()
                    if f"trying to kill task 0.{loser} in stage" in line
                    and "reason: another attempt succeeded" in line]
    figures = {**_figures(settled["report"]), "speculative_attempts": len(speculative),
               "loser_killed": len(loser_killed),
               "hosts": sorted({t["Host"] for t in starts}),
               "attempt_ids": sorted(t for t in settled["ids"] if not t.endswith("-0")),
               "seconds": round(time.monotonic() - started, 1)}
    _record(f"standalone 2 hosts: speculation, the {winner} wins", figures)
    print("speculation: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert speculative, "Spark launched no speculative copy"
    # The copy is attempt 1 of task 0 and wrote under its own transactional id ...
    assert any(t["Index"] == 0 and t["Attempt"] >= 1 for t in speculative)
    assert any(t.startswith(f"{names['prefix']}:s") and t.endswith("-0-1") for t in settled["ids"])  # the run's
    # ... and the loser, pre-committed, was killed for the winner.
    assert loser_killed, f"Spark killed no attempt {loser} for a winning one"
    _assert_exactly_once(settled)


def _slow_writing_task_executor(cluster: StandaloneCluster, driver: Submitted, events: Path,
                                deadline: float) -> int:
    """The pid of the executor running a task of a writing stage for SLOW_TASK_SECONDS or
    more. Writing stages come from the event log as it is written (Spark runs each
    batch's shuffle map stage as a job of its own, then a job of two stages, that one
    (skipped: its output is there) and the writing stage: the job's last stage id); the running tasks from the
    executors' logs ('Running task 0.0 in stage 7.0 (TID 12)' without its 'Finished')."""
    running_since: dict = {}
    while time.monotonic() < deadline:
        driver.check_running()
        now = time.monotonic()
        writing = {max(e["Stage IDs"]) for e in _events(events)
                   if e["Event"] == "SparkListenerJobStart" and len(e["Stage IDs"]) > 1}
        for pid, log in cluster.executor_logs().items():
            try:
                text = log.read_text(errors="replace")
            except OSError:
                continue
            running = set(RUNNING.findall(text)) - set(FINISHED.findall(text))
            for stage, tid in running:
                if int(stage) in writing and now - running_since.setdefault((pid, tid), now) >= SLOW_TASK_SECONDS:
                    return pid
        time.sleep(0.5)
    pytest.fail(f"no task of a writing stage ran for {SLOW_TASK_SECONDS:.0f}s:\n{cluster.log_tails()}")


RUNNING = re.compile(r"Running task \S+ in stage (\d+)\.\d+ \(TID (\d+)\)")
FINISHED = re.compile(r"Finished task \S+ in stage (\d+)\.\d+ \(TID (\d+)\)")


def test_a_resubmitted_writing_stage_on_a_standalone_cluster_is_exactly_once(kafka, tmp_path):
    """A shuffle before the sink; while a batch's writing stage runs (its task 0 stalled
    before its pre-commit) the executor running that task is SIGKILLed. Its shuffle
    output is lost with it, the task's retry cannot fetch it (FetchFailed), and Spark
    resubmits the map stage and then the writing stage as stage attempt 1, whose tasks
    reuse the transactional ids of attempt 0."""
    started = time.monotonic()
    # Two hosts: on one, an executor would read a dead neighbour's shuffle files straight
    # from the shared disk (spark.shuffle.readHostLocalDisk) and nothing would be lost.
    cluster = StandaloneCluster(tmp_path / "spark", hosts=("127.0.0.2", "127.0.0.3"))
    try:
        cluster.start()
        driver, names = _retry_run(kafka, cluster, tmp_path, "stage-retry",
                                   f"task-before-precommit@{RETRY_BATCH}#0!0:sleep20", {}, ["--shuffle"])
        try:
            victim = _slow_writing_task_executor(cluster, driver, names["events"], time.monotonic() + STEP_TIMEOUT)
            killed = processes.kill_tree(victim)
            assert driver.wait(DRAIN_TIMEOUT) == 0, tail(driver.log)
        finally:
            if driver.proc.poll() is None:
                processes.kill_tree(driver.proc.pid)
    finally:
        cluster.stop()
    events = _events(names["events"])
    settled = _settled(kafka, names)
    # The writing stage: the last stage of a two-stage job (see _slow_writing_task_executor).
    writing = {max(e["Stage IDs"]) for e in events
               if e["Event"] == "SparkListenerJobStart" and len(e["Stage IDs"]) > 1}
    attempts = [(e["Stage Info"]["Stage ID"], e["Stage Info"]["Stage Attempt ID"]) for e in events
                if e["Event"] == "SparkListenerStageSubmitted"]
    retried_writing = sorted({(s, a) for s, a in attempts if s in writing and a > 0})
    fetch_failed = [e for e in events if e["Event"] == "SparkListenerTaskEnd"
                    and e["Task End Reason"].get("Reason") == "FetchFailed"]
    figures = {**_figures(settled["report"]), "processes_killed": len(killed),
               "fetch_failed_tasks": len(fetch_failed), "writing_stage_attempts_retried": retried_writing,
               "seconds": round(time.monotonic() - started, 1)}
    _record("standalone: writing stage resubmitted", figures)
    print("stage retry: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    assert fetch_failed, "no task of the writing stage failed to fetch the lost shuffle output"
    assert retried_writing, f"no writing stage ran a second attempt: {attempts}"
    _assert_exactly_once(settled)


def _figures(report) -> dict:
    return {"records_in": report.records_in, "records_out": report.records_out,
            "duplicates": report.duplicates, "losses": report.losses, "unexpected": report.unexpected}
