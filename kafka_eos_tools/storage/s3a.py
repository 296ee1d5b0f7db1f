"""Hadoop's own ``s3a://`` file system, for a checkpoint on an S3-compatible store and for
a Hive metastore serving ``s3a://`` tables.

Spark writes a streaming query's checkpoint with its Hadoop client; pyspark ships that
client (``hadoop-client-api``) but not ``hadoop-aws`` nor the AWS SDK it needs. They are
fetched once by Maven, at the Hadoop version of the installed pyspark (the two must
match), and given to Spark as ``spark.jars`` (or put on the embedded metastore's
classpath, :mod:`.metastore`). The sink's own steps read the checkpoint through boto3
(:mod:`kafka_eos_ds.storage.s3`), configured by the same ``fs.s3a.*`` names.
"""

from __future__ import annotations

from pathlib import Path

from kafka_eos_tools.broker import maven
from kafka_eos_tools.storage.process import require


def hadoop_version() -> str:
    """The Hadoop client version the installed pyspark ships (``hadoop-client-api-X.jar``)."""
    import pyspark

    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise RuntimeError("pyspark ships no hadoop-client-api jar: cannot tell which hadoop-aws matches it")
    return jars[-1].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def jars() -> list[Path]:
    """hadoop-aws of pyspark's Hadoop version and its runtime dependencies (the AWS SDK
    bundle, ~650 MB, fetched once)."""
    require("mvn", "it fetches hadoop-aws and the AWS SDK once (e.g. 'apt-get install maven').")
    version = hadoop_version()
    directory = maven.fetch([f"org.apache.hadoop:hadoop-aws:{version}"], f"hadoop-aws-{version}")
    return sorted(directory.glob("*.jar"))


def spark_jars() -> str:
    """``spark.jars`` for ``s3a://``: :func:`jars`."""
    return ",".join(map(str, jars()))


def hadoop_settings(endpoint: str, region: str) -> dict[str, str]:
    """Hadoop settings that point ``s3a://`` at ``endpoint`` with path-style addressing.
    Credentials are not among them: S3A reads ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
    from the environment, which process listings, Spark's UI and configuration files do
    not show."""
    return {"fs.s3a.endpoint": endpoint, "fs.s3a.endpoint.region": region, "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https:")).lower()}


def spark_settings(endpoint: str, region: str) -> dict[str, str]:
    """:func:`hadoop_settings` as Spark settings (``spark.hadoop.*``)."""
    return {f"spark.hadoop.{key}": value for key, value in hadoop_settings(endpoint, region).items()}
