"""format("kafka_eos") and format("kafka_eos_file") are found without a register call, and
format("kafka_eos") through spark-submit --py-files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from kafka_eos_tools.topics import produce

REPO = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    bootstrap, topic, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    if mode == "register":
        import kafka_eos_ds
        kafka_eos_ds.register(spark)
    df = (spark.read.format("kafka_eos").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    values = sorted(r.value.decode() for r in df.select("value").collect())

    def where_loaded(_):
        import kafka_eos_ds
        yield kafka_eos_ds.__file__

    executor_file = spark.sparkContext.parallelize([0], 1).mapPartitions(where_loaded).collect()[0]
    if len(sys.argv) > 4:  # and the file sink's format, found the same way
        spark.range(0, 5).write.format("kafka_eos_file").mode("append").save(sys.argv[4])
        print("ROWS=%d" % spark.read.parquet(sys.argv[4]).count())
    import kafka_eos_ds
    print("VALUES=" + ",".join(values))
    print("DRIVER_FILE=" + kafka_eos_ds.__file__)
    print("EXECUTOR_FILE=" + executor_file)
    spark.stop()
    """
)


def _spark_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=_spark_env(), capture_output=True, text=True, timeout=300)
    causes = [line for line in proc.stderr.splitlines() if "Exception:" in line or "Error:" in line]
    assert proc.returncode == 0, "\n".join(causes[-10:]) + "\n---\n" + proc.stderr[-3000:]
    return proc


def _lines(proc: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line and line.isascii())


@pytest.fixture
def three_records(kafka, new_topic) -> str:
    topic = new_topic()
    produce(kafka.bootstrap, topic, [b"a", b"b", b"c"])
    return topic


def test_installed_package_is_discovered_without_register(kafka, three_records, tmp_path):
    """Both formats, kafka_eos and kafka_eos_file, in one job that never calls register()."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    out = _lines(_run([sys.executable, str(job), kafka.bootstrap, three_records, "auto", str(tmp_path / "table")],
                      tmp_path))
    assert out["VALUES"] == "a,b,c"
    assert out["ROWS"] == "5"


def _spark_submit() -> str:
    import pyspark

    candidate = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    return str(candidate) if candidate.exists() else shutil.which("spark-submit") or "spark-submit"


def _package_zip(dest: Path) -> Path:
    archive = dest / "kafka_eos_ds.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in (REPO / "kafka_eos_ds").rglob("*.py"):
            zf.write(path, path.relative_to(REPO))
    return archive


# The gate runs --py-files with register(); the shim's discovery runs there in
# test_installed_package_is_discovered_without_register, the shim in --py-files in the full profile.
@pytest.mark.parametrize("route", [pytest.param("shim", marks=pytest.mark.full), "register"])
def test_spark_submit_py_files(kafka, three_records, tmp_path, route):
    """The documented --py-files routes: the package as a .zip plus either the one-file
    shim (discovered: Spark does not look inside .zip files) or an explicit register()."""
    job = tmp_path / "job.py"
    job.write_text(JOB)
    py_files = [str(_package_zip(tmp_path))]
    if route == "shim":
        shutil.copy(REPO / "pyspark_kafka_eos.py", tmp_path / "pyspark_kafka_eos.py")
        py_files.append(str(tmp_path / "pyspark_kafka_eos.py"))
    cmd = [_spark_submit(), "--master", "local[1]", "--py-files", ",".join(py_files), str(job),
           kafka.bootstrap, three_records, "auto" if route == "shim" else "register"]
    out = _lines(_run(cmd, tmp_path))
    assert out["VALUES"] == "a,b,c"
    # The code that ran is the shipped copy, not an installed one.
    assert "kafka_eos_ds.zip" in out["DRIVER_FILE"]
    assert "kafka_eos_ds.zip" in out["EXECUTOR_FILE"]
