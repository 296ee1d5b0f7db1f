"""A Hive metastore (Thrift) on 127.0.0.1, from the jars inside the installed pyspark.

pyspark ships the Hive 2.3 metastore classes, Derby and DataNucleus for its own
embedded catalog; the same classes serve a remote metastore. ``HiveMetaStore``'s own
``main`` binds every interface (Hive 2.3 has no bind-host setting for it), so a launcher
of a few lines (:data:`LAUNCHER`) serves the same handler, processor and transport as
``HiveMetaStore.startMetaStore`` does without SASL, on a 127.0.0.1 socket. The catalog is
an embedded Derby database in the server's directory, created on first use. "Ready"
means a client's ``get_all_databases`` call answers.

pyspark's jars serve ``hdfs://`` and ``file:`` tables only: the metastore checks (and
makes) a table's location with its own Hadoop client. With ``s3`` (Hadoop's ``fs.s3a.*``
settings, :func:`.s3a.hadoop_settings`) it also serves ``s3a://`` tables: ``hadoop-aws``
and the AWS SDK of pyspark's Hadoop version (:func:`.s3a.jars`) join its classpath and the
settings its ``hive-site.xml``. Credentials never go into that file: S3A reads them from
the process's environment (``environment``: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``).
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path
from typing import Mapping
from xml.sax.saxutils import escape

from kafka_eos_tools.storage import ServerError, javamain
from kafka_eos_tools.storage.process import EmbeddedServer, free_port

HEAP_OPTS = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

LAUNCHER = """
import java.net.InetSocketAddress;
import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TUGIBasedProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.thrift.TUGIContainingTransport;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;

/** Arg: the Thrift port. Settings come from hive-site.xml on the classpath. */
public class KafkaEosMetastore {
  public static void main(String[] args) throws Exception {
    HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
    ThriftHiveMetastore.Iface handler = HiveMetaStore.newRetryingHMSHandler("kafka-eos metastore", conf, false);
    handler.get_all_databases();  // creates the Derby schema before the port opens
    TServerSocket socket = new TServerSocket(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[0])));
    TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
        .processor(new TUGIBasedProcessor<>(handler))
        .transportFactory(new TUGIContainingTransport.Factory())
        .protocolFactory(new TBinaryProtocol.Factory())
        .minWorkerThreads(2)
        .maxWorkerThreads(32);
    System.out.println("KAFKA_EOS_METASTORE_STARTED thrift://127.0.0.1:" + args[0]);
    System.out.flush();
    new TThreadPoolServer(serverArgs).serve();
  }
}
"""

_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %p %c{1}: %m%n
"""


def pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise ServerError("The embedded Hive metastore runs from the pyspark wheel's jars; install pyspark, or name "
                          "an existing metastore with KAFKA_EOS_METASTORE=thrift://host:port.") from exc
    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("hive-metastore-*.jar")):
        raise ServerError(f"No hive-metastore jar in {jars}; this pyspark was built without Hive support.")
    return jars


def site_settings(directory: Path) -> dict[str, str]:
    """The metastore's settings: Derby and the warehouse inside ``directory``."""
    return {
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={directory / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "hive.metastore.warehouse.dir": (directory / "warehouse").as_uri(),
        # Create the schema on first use instead of running schematool.
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        # Hive's log4j2 default is asynchronous, which needs a jar pyspark does not ship.
        "hive.async.log.enabled": "false",
        # Pooling with the one pool implementation pyspark ships.
        "datanucleus.connectionPoolingType": "HikariCP",
    }


class EmbeddedMetastore(EmbeddedServer):
    """A Hive metastore with its Derby catalog in ``directory``, on a free loopback port.

    ``uri`` is the ``thrift://127.0.0.1:PORT`` address (Spark's ``hive.metastore.uris``).
    ``s3``: ``fs.s3a.*`` settings to serve ``s3a://`` tables too (no credentials);
    ``environment``: more variables of the server's environment (the credentials).
    """

    name = "The embedded Hive metastore"

    def __init__(self, directory: str | Path, s3: Mapping[str, str] | None = None,
                 environment: Mapping[str, str] | None = None) -> None:
        super().__init__(directory)
        secret = [k for k in s3 or {} if k.lower().endswith((".key", ".token", "password"))]
        if secret:
            raise ServerError(f"{', '.join(secret)} would be written to hive-site.xml: give the metastore's "
                              "credentials in its environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) instead.")
        self.s3 = dict(s3) if s3 is not None else None
        self._environment = dict(environment or {})
        self.port = 0

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> str:
        """Start the metastore; returns :attr:`uri` once it lists databases."""
        jars = pyspark_jars()
        classpath = f"{jars}/*"
        settings = site_settings(self.directory)
        if self.s3 is not None:
            from kafka_eos_tools.storage import s3a

            classpath += "".join(f":{jar}" for jar in s3a.jars())
            settings.update(self.s3)
        classes = javamain.compiled("KafkaEosMetastore", LAUNCHER, ":".join(sorted(map(str, jars.glob("*.jar")))))
        conf = self.directory / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "hive-site.xml").write_text(_site_xml(settings))
        (conf / "log4j2.properties").write_text(_LOG4J2)
        self.port = free_port()
        cmd = [javamain.java(), *HEAP_OPTS, "-Djava.awt.headless=true",
               f"-Dderby.system.home={self.directory}", f"-Dderby.stream.error.file={self.directory / 'derby.log'}",
               f"-Dlog4j2.configurationFile={conf / 'log4j2.properties'}",
               "-cp", f"{conf}:{classes}:{classpath}", "KafkaEosMetastore", str(self.port)]
        self.launch(cmd, lambda: list_databases(self.port) is not None, timeout, "get_all_databases answered",
                    env={**os.environ, **self._environment})
        return self.uri


def _site_xml(settings: dict[str, str]) -> str:
    props = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                    for k, v in settings.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{props}</configuration>\n'


def list_databases(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> list[str]:
    """``ThriftHiveMetastore.get_all_databases()`` in Thrift's binary protocol, by hand:
    the readiness check needs one call, not a Thrift library."""
    name = b"get_all_databases"
    # Strict binary protocol: version | CALL, the method name, a sequence id, an empty
    # argument struct (STOP).
    request = struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">iB", 1, 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        reader = sock.makefile("rb")
        version_type, length = struct.unpack(">iI", _read(reader, 8))
        _read(reader, length + 4)  # method name, sequence id
        if version_type & 0xFF != 2:  # 2: REPLY; 3: EXCEPTION
            raise ServerError("The metastore answered get_all_databases with an exception.")
        field_type, field_id = struct.unpack(">Bh", _read(reader, 3))
        if (field_type, field_id) != (15, 0):  # field 0 (success) must be a list
            raise ServerError(f"The metastore answered get_all_databases with field {field_id} (an error).")
        _element_type, size = struct.unpack(">Bi", _read(reader, 5))
        names = []
        for _ in range(size):
            (n,) = struct.unpack(">I", _read(reader, 4))
            names.append(_read(reader, n).decode())
        return names


def _read(reader, n: int) -> bytes:
    data = reader.read(n)
    if len(data) != n:
        raise ServerError("The metastore closed the connection mid-answer.")
    return data
