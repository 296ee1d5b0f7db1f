"""Peak memory of Spark's Python workers during one measured run.

The workers are forks of the pyspark daemon under the driver's JVM. A sampler thread
reads their resident set size from /proc every 100 ms; the peak of the sum (all workers
at once) and the peak of one worker are reported. The built-in connector runs no Python
workers, so its figures are zero.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kafka_eos_ds.demo.processes import descendants


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _is_worker(pid: int) -> bool:
    try:
        return b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class WorkerMemory(threading.Thread):
    def __init__(self, root: int | None = None, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = root or os.getpid()
        self.interval = interval
        self.peak_total = 0
        self.peak_one = 0
        self._stop = threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            sizes = [_rss_bytes(pid) for pid in descendants(self.root) if _is_worker(pid)]
            if sizes:
                self.peak_total = max(self.peak_total, sum(sizes))
                self.peak_one = max(self.peak_one, max(sizes))
            self._stop.wait(self.interval)

    def __enter__(self) -> "WorkerMemory":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.join(2)
