"""A class-data archive of Spark's driver JVM, so that each driver the tests start starts faster.

Every Spark driver JVM parses and verifies the same ~20,000 classes of pyspark's jars
before it runs a query; the crash tests start a driver process for each run a fault kills,
so on the 2-core machine the gate spent much of its CPU there. Java's application class-data
sharing (a dynamic archive, JDK 13+) lets a JVM map the classes an earlier JVM wrote out
instead: a local Spark session and its first query start about a third faster (measured:
18.5 s -> 12.2 s and 19.2 s -> 14.0 s, docs/dev/testing.md, "The drivers' class archive").

The archive is built once per pyspark version, JDK and class path by
``python -m kafka_eos_tools.jvm_archive`` (scripts/setup.sh runs it) from a short job that
runs the same kinds of queries the tests do: a Python data source read and written in a
stream and in a batch, with a shuffle. A JVM whose JDK or class path differs from the
archive's ignores it (``-Xshare:auto``, Java's default) and starts as before, so a stale
or missing archive costs speed, never a result.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kafka_eos_tools.broker.maven import cache_root

KEEP = 8  # archives kept in the cache: four pyspark lines of two checkouts


@functools.lru_cache(maxsize=1)  # a JVM's start and a stat of every jar: once per process, not per driver
def archive_file() -> Path:
    """The archive for this Python's pyspark and the ``java`` Spark will start. Keyed by
    what the JVM checks before it maps one: the JDK, and each jar's path, size and time
    (another venv's pyspark, even of the same version, is another class path)."""
    import pyspark

    jars = (Path(pyspark.__file__).parent / "jars").resolve()
    key = hashlib.sha256()
    key.update(pyspark.__version__.encode())
    key.update(_java_version().encode())
    for name in sorted(os.listdir(jars)) if jars.is_dir() else []:
        stat = (jars / name).stat()
        key.update(f"{jars / name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_root() / "jvm-archive" / f"spark-{pyspark.__version__}-{key.hexdigest()[:16]}.jsa"


def java_options(base: str = "") -> str:
    """``base`` plus the archive's option when it has been built (else ``base``;
    ``KAFKA_EOS_JVM_ARCHIVE=0``: never, to compare)."""
    archive = archive_file()
    if os.environ.get("KAFKA_EOS_JVM_ARCHIVE") == "0" or not archive.is_file():
        return base
    # Silent when the archive does not fit (a JVM with other jars first on its class path,
    # as spark-submit's Connect server): Java's warning goes to stdout, where a driver's
    # parent may read its answers.
    return f"{base} -XX:SharedArchiveFile={archive} -Xlog:cds=off,cds+dynamic=off".strip()


def _java_version() -> str:
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    try:
        done = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stderr.strip()


def build() -> Path | None:
    """Write the archive unless it exists; the path, or None when it could not be written
    (the tests then run without it: slower, not different)."""
    archive = archive_file()
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="kafka-eos-jvm-archive-") as work:
        done = subprocess.run([sys.executable, "-m", "kafka_eos_tools.jvm_archive", "--warm-up", str(partial), work],
                              capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        sys.stderr.write(f"jvm archive: not built (exit {done.returncode}); drivers start without it\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}\n")
        return None
    os.replace(partial, archive)  # whole or absent: a JVM never maps a half-written file
    _prune(archive.parent)
    return archive


def _prune(directory: Path) -> None:
    """Keep the newest ``KEEP`` archives: each clone's venv is another class path, and
    each archive about 160 MB."""
    archives = sorted(directory.glob("*.jsa"), key=lambda path: path.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        old.unlink(missing_ok=True)


def _warm_up(partial: str, work: str) -> None:
    """The queries whose classes the archive holds; the JVM writes it when Spark stops."""
    from pyspark.sql import SparkSession

    from kafka_eos_tools.jvm_archive_source import WarmUpSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("kafka-eos-jvm-archive")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={partial}")
             .getOrCreate())
    spark.dataSource.register(WarmUpSource)
    spark.read.format("kafka_eos_warm_up").load().groupBy("key").count().collect()
    spark.read.format("kafka_eos_warm_up").load().write.format("kafka_eos_warm_up").mode("append").save()
    query = (spark.readStream.format("kafka_eos_warm_up").load()
             .selectExpr("key", "upper(cast(value as string)) AS value")
             .writeStream.format("kafka_eos_warm_up")
             .option("checkpointLocation", os.path.join(work, "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    spark.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["--warm-up"]:
        _warm_up(argv[1], argv[2])
        return 0
    archive = build()
    print(f"jvm archive: {archive or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
