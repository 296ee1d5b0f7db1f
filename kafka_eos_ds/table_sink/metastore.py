"""A table's partitions in a Hive metastore: registered once a batch's files are final.

For readers that go through the metastore (Spark with Hive support, Hive, Trino), a
partition exists from the moment it is registered (measured: docs/dev/decisions.md, "Test
servers for tables"). The sink registers the partitions a batch wrote files into before
the batch's decision (:func:`~.publishing.register_partitions`: a partition the
metastore refuses then refuses the batch, undecided, and a registered partition holds no
rows until files are final in it), and again after every file of the batch is final and
before the batch is recorded done (the committer's ``publish`` step), with
``add_partitions(ifNotExists=True)``: registering a partition again adds nothing. A
unique-key clash of two writers registering one new partition at once is retriable.

The table is created from the DataFrame's schema when it does not exist: an external
Parquet table at the sink's ``path``, its columns the DataFrame's minus the plain
partition columns, partitioned by ``partitionBy``'s columns (time buckets as strings).
An existing table must have the same partition columns, in order. The database must
exist. The client is hmsclient (Thrift stubs of the Hive 2.x metastore API; its errors,
and Thrift's, become :class:`~kafka_eos_ds.errors.StorageError` here).
"""

from __future__ import annotations

import contextlib
import copy
import time
from typing import Any, Iterator, Sequence

from kafka_eos_ds.errors import ConfigError, StorageError
from kafka_eos_ds.table_sink.partitions import Partitioning, values_of

_TIMEOUT_MS = 30_000
_CHUNK = 500  # partitions per add_partitions call
_PARQUET = {"inputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
            "outputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
            "serde": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"}


class Metastore:
    """One table (``database.name`` at ``location``) in the metastore(s) ``uris``."""

    def __init__(self, database: str, name: str, uris: Sequence[str], location: str) -> None:
        self.database = database
        self.name = name
        self.uris = tuple(uris)
        self.location = location.rstrip("/")

    def __repr__(self) -> str:
        return f"Metastore({self.database}.{self.name} at {', '.join(self.uris)})"

    def ensure_table(self, schema: Any, partitioning: Partitioning) -> None:
        """Create the table from ``schema`` (a Spark StructType) if it does not exist;
        ConfigError if it exists with other partition columns."""
        from hmsclient.genthrift.hive_metastore.ttypes import AlreadyExistsException, NoSuchObjectException

        wanted = [(c.name.lower(), c.hive_type if c.bucket is None else "string") for c in partitioning.columns]
        with self._client() as client:
            try:
                table = client.get_table(self.database, self.name)
            except NoSuchObjectException:
                table = None
            if table is None:
                try:
                    client.create_table(self._table(schema, partitioning))
                except AlreadyExistsException:
                    pass  # another writer created it meanwhile
                return
        found = [(k.name.lower(), k.type) for k in table.partitionKeys or ()]
        if [n for n, _ in found] != [n for n, _ in wanted]:
            raise ConfigError(f"Option 'table' = '{self.database}.{self.name}' exists in the metastore partitioned by "
                              f"({', '.join(n for n, _ in found) or 'nothing'}); 'partitionBy' makes "
                              f"({', '.join(n for n, _ in wanted) or 'nothing'}). Make them the same, or name "
                              "another table.")

    def register(self, directories: Sequence[str]) -> None:
        """Add the partitions of ``directories`` (``dt=.../shard=...``) that are not there yet."""
        from hmsclient.genthrift.hive_metastore.ttypes import (
            AddPartitionsRequest,
            AlreadyExistsException,
            MetaException,
            Partition,
        )

        directories = [d for d in dict.fromkeys(directories) if d]
        if not directories:
            return
        with self._client() as client:
            table = client.get_table(self.database, self.name)
            now = int(time.time())
            parts = []
            for directory in directories:
                sd = copy.deepcopy(table.sd)
                sd.location = f"{self.location}/{directory}"
                parts.append(Partition(values=values_of(directory), dbName=self.database, tableName=self.name,
                                       createTime=now, lastAccessTime=0, sd=sd, parameters={}))
            for start in range(0, len(parts), _CHUNK):
                request = AddPartitionsRequest(self.database, self.name, parts[start:start + _CHUNK],
                                               ifNotExists=True, needResult=False)
                try:
                    client.add_partitions_req(request)
                except (AlreadyExistsException, MetaException) as exc:
                    if not _duplicate(exc):
                        raise
                    # Another writer registered one of them between this call's check and its
                    # insert (the metastore's unique key): a retry finds it there.
                    raise StorageError(f"Registering partitions of {self.database}.{self.name} met a concurrent "
                                       f"registration: {exc.message}", retriable=True) from exc

    def partition_names(self) -> list[str]:
        with self._client() as client:
            return list(client.get_partition_names(self.database, self.name, -1))

    def _table(self, schema: Any, partitioning: Partitioning) -> Any:
        from hmsclient.genthrift.hive_metastore.ttypes import FieldSchema, SerDeInfo, StorageDescriptor, Table

        plain = {c.lower() for c in partitioning.plain}
        columns = [FieldSchema(f.name, hive_type(f.dataType.simpleString()), None) for f in schema.fields
                   if f.name.lower() not in plain]
        keys = [FieldSchema(c.name, c.hive_type if c.bucket is None else "string", None)
                for c in partitioning.columns]
        sd = StorageDescriptor(cols=columns, location=self.location, inputFormat=_PARQUET["inputFormat"],
                               outputFormat=_PARQUET["outputFormat"], compressed=False, numBuckets=-1,
                               serdeInfo=SerDeInfo(None, _PARQUET["serde"], {"serialization.format": "1"}),
                               bucketCols=[], sortCols=[], parameters={})
        return Table(tableName=self.name, dbName=self.database, owner="kafka-eos", createTime=int(time.time()),
                     lastAccessTime=0, retention=0, sd=sd, partitionKeys=keys,
                     parameters={"EXTERNAL": "TRUE"}, tableType="EXTERNAL_TABLE")

    @contextlib.contextmanager
    def _client(self) -> Iterator[Any]:
        """A connected client of the first metastore that answers; every error of the
        calls made with it as StorageError (ConfigError for a missing database)."""
        from hmsclient import hmsclient
        from hmsclient.genthrift.hive_metastore.ttypes import (
            InvalidObjectException,
            MetaException,
            NoSuchObjectException,
        )
        from thrift.protocol import TBinaryProtocol
        from thrift.Thrift import TException
        from thrift.transport import TSocket, TTransport

        client, failures = None, []
        for uri in self.uris:
            host, port = uri.removeprefix("thrift://").rsplit(":", 1)
            socket = TSocket.TSocket(host, int(port))
            socket.setTimeout(_TIMEOUT_MS)
            protocol = TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(socket))
            candidate = hmsclient.HMSClient(iprot=protocol)
            try:
                client = candidate.open()
                break
            except TException as exc:
                failures.append(f"{uri}: {exc}")
        if client is None:
            raise StorageError(f"No Hive metastore answers ({'; '.join(failures)}); check 'hive.metastore.uris'.",
                               retriable=True)
        try:
            yield client
        except (NoSuchObjectException, InvalidObjectException) as exc:
            raise ConfigError(f"Option 'table' = '{self.database}.{self.name}': the metastore has no such database or "
                              f"table ({exc.message}). Create the database first.") from exc
        except MetaException as exc:
            raise StorageError(f"The Hive metastore refused a call on {self.database}.{self.name}: {exc.message}",
                               retriable=False) from exc
        except (TException, OSError) as exc:
            raise StorageError(f"A call to the Hive metastore on {self.database}.{self.name} failed: {exc}",
                               retriable=True) from exc
        finally:
            with contextlib.suppress(Exception):
                client.close()


def _duplicate(exc: Any) -> bool:
    """Whether a metastore error is a unique-key clash (two writers registering one new
    partition at once): the backing database's words for it (MySQL, PostgreSQL, Derby)."""
    text = str(getattr(exc, "message", "") or exc).lower()
    return any(word in text for word in ("duplicate", "already exists", "uniquepartition"))


def hive_type(spark_type: str) -> str:
    """A Spark SQL type's name in Hive's DDL (Spark's simple strings are Hive's, but for
    timestamps without a time zone, which Hive 2 calls timestamp)."""
    return spark_type.replace("timestamp_ntz", "timestamp")
