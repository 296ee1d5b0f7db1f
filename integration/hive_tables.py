"""Hive metastore objects for tests, built with hmsclient's Thrift types: what the
table sink will send to register a table and its partitions."""

from __future__ import annotations

import copy
import time

from hmsclient.genthrift.hive_metastore.ttypes import (
    FieldSchema,
    Partition,
    SerDeInfo,
    StorageDescriptor,
    Table,
)


def external_parquet_table(db: str, name: str, location: str) -> Table:
    """An external Parquet table (id bigint, value string) partitioned by dt string."""
    sd = StorageDescriptor(
        cols=[FieldSchema("id", "bigint", None), FieldSchema("value", "string", None)], location=location,
        inputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
        outputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat", compressed=False,
        numBuckets=-1, serdeInfo=SerDeInfo(None, "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
                                           {"serialization.format": "1"}),
        bucketCols=[], sortCols=[], parameters={})
    return Table(tableName=name, dbName=db, owner="kafka-eos", createTime=int(time.time()), lastAccessTime=0,
                 retention=0, sd=sd, partitionKeys=[FieldSchema("dt", "string", None)],
                 parameters={"EXTERNAL": "TRUE"}, tableType="EXTERNAL_TABLE")


def partition(table: Table, value: str) -> Partition:
    """The partition dt=value of ``table``, its files under the table's location."""
    sd = copy.deepcopy(table.sd)
    sd.location = f"{table.sd.location}/dt={value}"
    return Partition(values=[value], dbName=table.dbName, tableName=table.tableName, createTime=int(time.time()),
                     lastAccessTime=0, sd=sd, parameters={})
