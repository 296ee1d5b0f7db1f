"""Storage servers for tests of tables on HDFS and object stores, run on 127.0.0.1.

* :mod:`.hdfs`: an HDFS MiniDFSCluster (one NameNode, one DataNode, RPC and WebHDFS)
  from ``org.apache.hadoop:hadoop-client-minicluster`` on Maven Central;
* :mod:`.minio`: a MinIO server built once with ``go install`` from the Go proxy;
* :mod:`.gcs`: a GCS emulator (fake-gcs-server), built the same way, and the settings
  and jar that point Spark's ``gs://`` at it;
* :mod:`.metastore`: a Hive metastore (Thrift, embedded Derby) from the jars inside the
  installed pyspark wheel.

Each one is a small class with ``start()`` (returns the address once a client can use
it, bounded in time) and ``stop()`` (by pid: SIGTERM, then SIGKILL). Like the embedded
Kafka, they are tooling: the product never imports them.
"""

from __future__ import annotations

from kafka_eos_tools.errors import BrokerError


class ServerError(BrokerError):
    """An embedded storage server could not be fetched, built, started or stopped."""
