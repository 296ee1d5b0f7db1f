"""The demo's Kafka-to-table variant: Kafka -> Spark -> a partitioned Hive table on HDFS
(or S3: ``TablePlan.store`` names an ``s3a://`` bucket, with the sink's ``fs.s3a.*``
options in ``store_options``), its driver SIGKILLed again and again, then the table audited through the metastore and
over its path (:mod:`.table_audit`).

The pipeline is the main job (:mod:`kafka_eos_tools.demo.job`) writing with
``format("kafka_eos_file")``: the Kafka timestamp's day and hour and a bucket of the key
(``pmod(crc32(key), buckets)``) make three levels of Hive-style directories
(``dt=2026-11-24/hour=13/bucket=2``), and each batch's partitions are registered in the
metastore once its files are final. The input is fed while the kills go on, as in the
Kafka demo (:class:`~kafka_eos_tools.demo.chaos.InputFeeder`); a kill comes at a random
moment (seeded) after the table has grown by a batch since the run started.
"""

from __future__ import annotations

import random
import time
import uuid
import zlib
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import Sequence

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.settings import logged
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_tools.audit import id_extractor, read_topic
from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.demo.chaos import ChaosPlan, InputFeeder, Pipeline, Progress, create_topics, drain

DATABASE = "kafka_eos_demo"
PARTITION_BY = "dt=date(timestamp),hour=hour(timestamp),bucket"
PARTITION_COLUMNS = ["dt", "hour", "bucket"]


@dataclass
class TablePlan:
    bootstrap: str
    store: str  # the table's store: hdfs://host:port, or s3a://bucket (its metastore must serve s3a://)
    metastore: str  # thrift://host:port
    workdir: Path
    records: int = 20_000  # the least input; more is fed while kills remain
    crashes: int = 3
    seed: int = 0
    buckets: int = 4
    max_offsets: int = 500
    kill_window: tuple[float, float] = (2.0, 10.0)  # seconds after the table last grew
    run_timeout: float = 300.0
    replication: int = 1
    # The sink's options for the store (fs.s3a.* for S3), which the audit's reads use too.
    store_options: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class TableResult:
    audit: table_audit.TableAudit
    crashes: int
    runs: int
    seconds: float
    fed: int

    @property
    def ok(self) -> bool:
        return self.audit.ok


def run_table_chaos(plan: TablePlan, progress: Progress = lambda msg, frac: None) -> TableResult:
    started = time.monotonic()
    rng = random.Random(plan.seed)
    plan.workdir.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    input_topic, table = f"demo-in-{run_id}", f"events_{run_id}"
    location = f"{plan.store}/kafka-eos-demo/{DATABASE}.db/{table}"
    create_topics(plan.bootstrap, {input_topic: 2}, plan.replication)
    create_database(plan.metastore, DATABASE, f"{plan.store}/kafka-eos-demo/{DATABASE}.db")
    chaos = table_pipeline(plan, plan.workdir, table, location)
    committed = CommittedInput(plan.workdir / "checkpoint")
    feeder = InputFeeder(plan.bootstrap, input_topic, plan.records, 3 * plan.max_offsets, committed.records)
    feeder.start()
    pipeline = Pipeline(chaos, input_topic, "unused")

    def frac() -> float:
        return min(1.0, committed.records() / max(plan.records, feeder.fed, 1))

    crashes = 0
    try:
        for number in range(1, plan.crashes + 1):
            pipeline.ensure_running()
            _wait_for_a_batch(plan, pipeline, committed, progress, frac)
            moment = time.monotonic() + rng.uniform(*plan.kill_window)
            while time.monotonic() < moment:
                pipeline.ensure_running()
                progress(f"run {pipeline.runs}: kill {number}/{plan.crashes} soon", frac())
                time.sleep(0.5)
            pipeline.kill(hard=True)
            crashes += 1
            progress(f"kill {number}/{plan.crashes} done (SIGKILL)", frac())
        pipeline.kill(hard=False)
        fed = feeder.finish()
        drain(chaos, pipeline, progress, frac)
        progress("auditing through the metastore and over the path", 1.0)
        audit = audit_table(plan, input_topic, table, location)
    finally:
        feeder.finishing.set()
        pipeline.kill(hard=True)
    return TableResult(audit, crashes, pipeline.runs, time.monotonic() - started, fed)


def table_pipeline(plan: TablePlan, workdir: Path, table: str, location: str, job_args: Sequence[str] = ()
                   ) -> ChaosPlan:
    """The pipeline into ``table`` at ``location``, its checkpoint and logs in ``workdir``
    (``job_args``: more arguments of the job, e.g. ``--resume-from-table``)."""
    return ChaosPlan(bootstrap=plan.bootstrap, workdir=workdir, records=plan.records, input_partitions=2,
                     max_offsets=plan.max_offsets, seed=plan.seed, run_timeout=plan.run_timeout,
                     sink_format="kafka_eos_file",
                     sink_options=[f"path={location}", f"partitionBy={PARTITION_BY}", f"table={DATABASE}.{table}",
                                   f"hive.metastore.uris={plan.metastore}", "successFile=true",
                                   *(f"{key}={value}" for key, value in plan.store_options.items())],
                     job_args=["--column", "timestamp", "--column", f"pmod(crc32(key), {plan.buckets}) as bucket",
                               *job_args])


class CommittedInput:
    """How many input records the table holds by now: the end offsets of the newest batch
    in the checkpoint's commit log (the input carries no transactions, so offsets count
    records). Progress and the feeder's pace, never the audit."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = checkpoint

    def batch(self) -> int:
        return Checkpoint.at(str(self.checkpoint)).latest_batch("commits") if self.checkpoint.exists() else -1

    def records(self) -> int:
        return sum(self.ends().values())

    def ends(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition), the offset the newest committed batch ends at."""
        batch = self.batch()
        if batch < 0:
            return {}
        try:
            ends = Checkpoint.at(str(self.checkpoint)).end_offsets(batch)
        except ConfigError:  # the log entry being written right now
            return {}
        return {(topic, int(part)): offset for topic, parts in ends.items() for part, offset in parts.items()}


def _wait_for_a_batch(plan: TablePlan, pipeline: Pipeline, committed: CommittedInput, progress: Progress,
                      frac) -> None:
    """Until the running driver has committed a batch of its own (a kill before that
    would only repeat the previous one's start-up)."""
    base = committed.batch()
    deadline = time.monotonic() + plan.run_timeout
    while committed.batch() <= base:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no batch committed within {plan.run_timeout:.0f}s; see {pipeline.log(pipeline.runs)}")
        pipeline.ensure_running()
        progress(f"run {pipeline.runs}: waiting for a batch", frac())
        time.sleep(0.5)


def create_database(uri: str, name: str, location: str) -> None:
    """The database the sink creates its table in (it must exist), if it does not yet."""
    from hmsclient.genthrift.hive_metastore.ttypes import AlreadyExistsException, Database

    with metastore_client(uri) as client:
        try:
            client.create_database(Database(name=name, description="kafka_eos demo", locationUri=location,
                                            parameters={}))
        except AlreadyExistsException:
            pass


def audit_table(plan: TablePlan, input_topics: str | Sequence[str], table: str, location: str,
                removed: Sequence[tuple[str, dict]] = (), dropped: Sequence[str] = ()) -> table_audit.TableAudit:
    """The table against its input topics (ids distinct across them). ``removed``: the rows
    a retention job read from the partitions ``dropped`` right before dropping them; each
    counts as the table's own, so every input id must be in the table or among them once."""
    topics = [input_topics] if isinstance(input_topics, str) else list(input_topics)
    inputs = [record for topic in topics
              for record in read_topic(logged({"bootstrap.servers": plan.bootstrap}), topic, id_extractor())]
    files = table_audit.filesystem(location, plan.store_options)
    root = table_audit.path_of(location)

    def placement(row: dict) -> str:
        return expected_partition(row, plan.buckets)

    with metastore_client(plan.metastore) as client:
        partitions, rows = table_audit.read_through_metastore(client, files, DATABASE, table)
    through_metastore = table_audit.audit_rows(inputs, [*rows, *removed], placement, len(partitions))
    on_disk, rows = table_audit.read_dataset(files, root, PARTITION_COLUMNS)
    over_path = table_audit.audit_rows(inputs, [*rows, *removed], placement, len(on_disk))
    registered = [n for n, _ in partitions]
    # Back: registered again, or its directory there again (files, or only a _SUCCESS marker).
    back = sorted(n for n in set(dropped) if n in registered or table_audit.exists(files, f"{root}/{n}"))
    return table_audit.TableAudit(
        f"{DATABASE}.{table}", location, through_metastore, over_path, registered=registered,
        on_disk=on_disk, wrong_location=[n for n, loc in partitions if loc.rstrip("/") != f"{location}/{n}"],
        staged_left=table_audit.staged_files(files, location, plan.store_options), dropped=sorted(set(dropped)),
        dropped_back=back)


def expected_partition(row: dict, buckets: int) -> str:
    """Where the pipeline puts a row: its Kafka timestamp's UTC day and hour, and Spark's
    ``pmod(crc32(key), buckets)`` (Spark's crc32 is zlib's CRC-32)."""
    stamp = row["timestamp"]
    stamp = stamp.replace(tzinfo=timezone.utc) if stamp.tzinfo is None else stamp.astimezone(timezone.utc)
    return table_audit.hive_name({"dt": stamp.strftime("%Y-%m-%d"), "hour": stamp.strftime("%H"),
                                  "bucket": str(zlib.crc32(row["key"]) % buckets)})


def metastore_client(uri: str):
    from hmsclient import hmsclient

    host, port = uri.removeprefix("thrift://").split(",")[0].rsplit(":", 1)
    return hmsclient.HMSClient(host=host, port=int(port))
