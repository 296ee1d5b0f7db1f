"""The table sink's runtime: the process's time, uuids and thread pool
(:class:`~kafka_eos_ds.twophase.runtime.Runtime`), the ``os`` its local store moves and
deletes files with, and the stamp of a task attempt's staged files.

:data:`DEFAULT` is the product's. A test builds its own :class:`TableRuntime` and hands it
to the sink (``FileSink(..., runtime=...)``, ``KafkaEosFileDataSource(options, runtime=...)``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.table_sink.layout import new_stamp
from kafka_eos_ds.twophase.runtime import Runtime, register


@dataclass(frozen=True)
class TableRuntime(Runtime):
    """A :class:`~kafka_eos_ds.twophase.runtime.Runtime` with the table sink's files.

    Parameters
    ----------
    os : module
        What the local store calls for every file and directory (``os``).
    stamp : callable
        A task attempt's own mark on its staged files (:func:`~.layout.new_stamp`).
    """

    os: Any = os
    stamp: Callable[[], str] = new_stamp

    def local_store(self) -> LocalStore:
        """The store of a local table, on this runtime's ``os`` and uuids."""
        return LocalStore(self.os, self.uuid4)


DEFAULT = register(TableRuntime("kafka_eos_file"))
