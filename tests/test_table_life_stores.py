"""The table-life run on either store: the embedded metastore serving ``s3a://`` tables
(hadoop-aws on its classpath, the ``fs.s3a.*`` settings in its hive-site.xml, the
credentials only in its environment), and the audit's and retention's reads and deletes
through a pyarrow file system of the table's store."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import LocalFileSystem, S3FileSystem

from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.storage import ServerError, javamain, metastore, s3a
from kafka_eos_tools.storage.metastore import EmbeddedMetastore

SECRET = "not-a-real-secret-0123456789"
S3_OPTIONS = {"fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.access.key": "kafka-eos-ab12",
              "fs.s3a.secret.key": SECRET, "fs.s3a.endpoint.region": "us-east-1",
              "fs.s3a.path.style.access": "true"}


def test_the_metastore_refuses_credentials_among_its_s3_settings_before_writing_anything(tmp_path):
    with pytest.raises(ServerError, match=r"fs\.s3a\.secret\.key.*AWS_SECRET_ACCESS_KEY"):
        EmbeddedMetastore(tmp_path / "ms", s3={**s3a.hadoop_settings("http://h:1", "us-east-1"),
                                               "fs.s3a.secret.key": SECRET})
    assert not (tmp_path / "ms").exists()


def _started(tmp_path, monkeypatch, **kwargs):
    """The command, environment and hive-site.xml a metastore would start with."""
    launched = {}
    monkeypatch.setattr(metastore, "pyspark_jars", lambda: tmp_path)
    monkeypatch.setattr(javamain, "compiled", lambda *args: tmp_path / "classes")
    monkeypatch.setattr(javamain, "java", lambda: "java")
    monkeypatch.setattr(s3a, "jars", lambda: [tmp_path / "hadoop-aws-3.5.0.jar", tmp_path / "bundle-2.35.4.jar"])
    monkeypatch.setattr(EmbeddedMetastore, "launch", lambda self, cmd, ready, timeout, what, env=None:
                        launched.update(cmd=cmd, env=env))
    server = EmbeddedMetastore(tmp_path / "ms", **kwargs)
    server.start()
    return launched["cmd"], launched["env"], (tmp_path / "ms" / "conf" / "hive-site.xml").read_text()


def test_an_s3_metastore_has_hadoop_aws_and_the_endpoint_and_its_credentials_only_in_its_environment(
        tmp_path, monkeypatch):
    cmd, env, site = _started(tmp_path, monkeypatch, s3=s3a.hadoop_settings("http://127.0.0.1:9000", "us-east-1"),
                              environment={"AWS_ACCESS_KEY_ID": "kafka-eos-ab12", "AWS_SECRET_ACCESS_KEY": SECRET})
    classpath = cmd[cmd.index("-cp") + 1].split(":")
    assert str(tmp_path / "hadoop-aws-3.5.0.jar") in classpath and str(tmp_path / "bundle-2.35.4.jar") in classpath
    for setting in ("<name>fs.s3a.endpoint</name><value>http://127.0.0.1:9000</value>",
                    "<name>fs.s3a.path.style.access</name><value>true</value>",
                    "<name>fs.s3a.connection.ssl.enabled</name><value>false</value>",
                    "<name>fs.s3a.endpoint.region</name><value>us-east-1</value>"):
        assert setting in site
    assert env["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert SECRET not in site and SECRET not in " ".join(cmd) and SECRET not in repr(vars(EmbeddedMetastore))


def test_a_metastore_without_s3_keeps_pyspark_s_jars_only(tmp_path, monkeypatch):
    cmd, _env, site = _started(tmp_path, monkeypatch)
    assert "hadoop-aws" not in cmd[cmd.index("-cp") + 1] and "fs.s3a" not in site


def test_spark_s_s3a_settings_are_the_hadoop_ones_prefixed():
    assert s3a.spark_settings("https://s3.example", "eu-central-1") == {
        "spark.hadoop.fs.s3a.endpoint": "https://s3.example", "spark.hadoop.fs.s3a.endpoint.region": "eu-central-1",
        "spark.hadoop.fs.s3a.path.style.access": "true", "spark.hadoop.fs.s3a.connection.ssl.enabled": "true"}


def test_paths_on_each_store_s_file_system():
    assert table_audit.path_of("hdfs://127.0.0.1:8020/lake/t/dt=1") == "/lake/t/dt=1"
    assert table_audit.path_of("s3a://bucket-1/lake/t/dt=1/") == "bucket-1/lake/t/dt=1"
    assert table_audit.path_of("s3://bucket-1") == "bucket-1"


def test_the_s3_file_system_is_the_sink_s_options():
    files = table_audit.filesystem("s3a://bucket-1/lake/t", S3_OPTIONS)
    assert isinstance(files, S3FileSystem)
    settings = files.__reduce__()[1][0]
    assert (settings["endpoint_override"], settings["scheme"], settings["region"]) == ("127.0.0.1:9000", "http",
                                                                                       "us-east-1")
    assert (settings["access_key"], settings["secret_key"]) == ("kafka-eos-ab12", SECRET)
    assert settings["force_virtual_addressing"] is False  # path-style, as fs.s3a.path.style.access says
    virtual = table_audit.filesystem("s3a://b/t", {"fs.s3a.endpoint": "https://s3.example"}).__reduce__()[1][0]
    assert (virtual["scheme"], virtual["force_virtual_addressing"]) == ("https", True)


def test_partition_rows_and_staged_files_through_a_pyarrow_file_system(tmp_path):
    partition = tmp_path / "dt=2026-11-24" / "hour=01"
    partition.mkdir(parents=True)
    pq.write_table(pa.table({"value": ["1|a", "2|b"]}), partition / "part-00001-x.parquet")
    (partition / "_SUCCESS").write_bytes(b"")
    staging = tmp_path / "_kafka_eos" / "q-1"
    for sub in ("in-progress", "pending", "decisions"):
        (staging / sub).mkdir(parents=True)
        (staging / sub / "f").write_bytes(b"x")
    files = LocalFileSystem()
    assert table_audit.partition_rows(files, str(partition)) == [("part-00001-x.parquet", {"value": "1|a"}),
                                                                  ("part-00001-x.parquet", {"value": "2|b"})]
    assert table_audit.staged_files(files, str(tmp_path), {}) == [str(staging / "in-progress" / "f"),
                                                                  str(staging / "pending" / "f")]
    assert table_audit.exists(files, str(partition)) and not table_audit.exists(files, str(tmp_path / "dt=x"))
    assert table_audit.staged_files(files, str(tmp_path / "empty"), {}) == []
