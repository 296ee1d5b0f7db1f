"""The servers of the demo's Kafka-to-table variant, started and stopped as one.

An embedded Kafka, an HDFS (MiniDFSCluster) and a Hive metastore on 127.0.0.1, each the
project's own (:mod:`kafka_eos_tools.broker`, :mod:`kafka_eos_tools.storage`), or an
existing one named on the command line. Whatever this class started it stops, by pid,
in reverse order, whatever happened in between: a demo that fails, is interrupted or
is asked to stop (SIGTERM) leaves no server behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Callable

Say = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class TableStores:
    """Kafka, HDFS and the metastore of one demo run; a context manager.

    ``bootstrap``, ``hdfs`` and ``metastore`` name existing servers; each left None is
    started in ``directory`` (Kafka in ``kafka_directory``, which the Kafka demo shares).
    """

    def __init__(self, directory: Path, kafka_directory: Path, brokers: int = 1, bootstrap: str | None = None,
                 hdfs: str | None = None, metastore: str | None = None, say: Say = _stderr) -> None:
        self.directory, self.kafka_directory, self.brokers = directory, kafka_directory, brokers
        self.bootstrap, self.hdfs, self.metastore = bootstrap, hdfs, metastore
        self.say = say
        self.started_kafka = False
        self.start_seconds = 0.0
        self._stops = contextlib.ExitStack()

    def __enter__(self) -> "TableStores":
        # SIGTERM (a test's timeout, a supervisor) would end the process without running
        # the stops below; as an exception it unwinds through them.
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        self._stops.callback(signal.signal, signal.SIGTERM, previous)
        started = time.monotonic()
        try:
            self._start()
            self.start_seconds = time.monotonic() - started
        except BaseException:
            self._stops.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stops.close()

    def _start(self) -> None:
        if self.bootstrap is None:
            from kafka_eos_tools.broker.cluster import EmbeddedKafka

            self.say(f"starting an embedded Apache Kafka ({self.brokers} node(s)) ...")
            cluster = EmbeddedKafka(self.kafka_directory, brokers=self.brokers)
            self._stops.callback(cluster.stop)  # start() stops its nodes itself if it fails
            self.bootstrap = cluster.start()
            self.started_kafka = True
        if self.hdfs is None:
            from kafka_eos_tools.storage.hdfs import EmbeddedHdfs

            self.say("starting an embedded HDFS (MiniDFSCluster) ...")
            hdfs = EmbeddedHdfs(self.directory / "hdfs")
            self._stops.callback(hdfs.stop)
            self.hdfs = hdfs.start()
        if self.metastore is None:
            from kafka_eos_tools.storage.metastore import EmbeddedMetastore

            self.say("starting an embedded Hive metastore ...")
            metastore = EmbeddedMetastore(self.directory / "metastore")
            self._stops.callback(metastore.stop)
            self.metastore = metastore.start()

    @property
    def replication(self) -> int:
        """The input topic's replication factor: the embedded cluster's size, up to 3."""
        return min(3, self.brokers) if self.started_kafka else 1


def missing_clients() -> list[str]:
    """The client libraries of the table variant that are not installed (the product's
    extras ``hdfs`` and ``hive``): checked before any server starts."""
    return [name for module, name in (("hdfs_native", "hdfs-native"), ("hmsclient", "hmsclient"))
            if importlib.util.find_spec(module) is None]


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
