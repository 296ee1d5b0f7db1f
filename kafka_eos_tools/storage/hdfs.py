"""An HDFS MiniDFSCluster on 127.0.0.1: one NameNode (RPC and WebHDFS) and one DataNode.

The cluster runs from ``org.apache.hadoop:hadoop-client-minicluster`` (shaded, so its
jars do not clash with anything) fetched once by Maven, in one JVM started by a launcher
of a few lines (:data:`LAUNCHER`). Permissions are off (every test is one user) and the
replication factor is 1. "Ready" means what a test needs: through WebHDFS a file is
created (its bytes reach the DataNode), renamed and listed.
"""

from __future__ import annotations

import getpass
import json
import urllib.request
from pathlib import Path

from kafka_eos_tools.broker import maven
from kafka_eos_tools.storage import javamain
from kafka_eos_tools.storage.process import EmbeddedServer, free_port, require

# Spark 4.1+ ships the Hadoop 3.5.0 client (hadoop-client-api-3.5.0.jar); the server
# speaks the same version.
HADOOP_VERSION = "3.5.0"

HEAP_OPTS = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]

LAUNCHER = """
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/** Args: base directory, NameNode RPC port, NameNode HTTP (WebHDFS) port. */
public class KafkaEosMiniHdfs {
  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, args[0]);
    conf.setBoolean("dfs.permissions.enabled", false);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setInt("dfs.replication", 1);
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.datanode.handler.count", 4);
    conf.setInt("dfs.namenode.safemode.extension", 0);
    // The DataNode's data, IPC and HTTP ports: free ones on loopback.
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
        .nameNodePort(Integer.parseInt(args[1]))
        .nameNodeHttpPort(Integer.parseInt(args[2]))
        .numDataNodes(1)
        .format(true)
        .build();
    cluster.waitActive();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    System.out.println("KAFKA_EOS_HDFS_STARTED hdfs://127.0.0.1:" + cluster.getNameNodePort());
    System.out.flush();
    Thread.currentThread().join();
  }
}
"""

# The minicluster's POM names no logging binding; slf4j-simple (as for the Kafka nodes)
# prints warnings and errors to the log file.
_SLF4J = "org.slf4j:slf4j-simple:1.7.36"


def minicluster_jars() -> Path:
    require("mvn", "it fetches the HDFS minicluster jars once (e.g. 'apt-get install maven'), or name an existing "
                   "HDFS with KAFKA_EOS_HDFS=hdfs://host:port.")
    return maven.fetch([f"org.apache.hadoop:hadoop-client-minicluster:{HADOOP_VERSION}", _SLF4J],
                       f"hadoop-minicluster-{HADOOP_VERSION}")


class EmbeddedHdfs(EmbeddedServer):
    """A one-DataNode HDFS in ``directory`` (data, log), on free loopback ports.

    ``url`` is the ``hdfs://127.0.0.1:PORT`` file system address (``fs.defaultFS``);
    ``webhdfs`` is the NameNode's HTTP address.
    """

    name = "The embedded HDFS"

    def __init__(self, directory: str | Path) -> None:
        super().__init__(directory)
        self.rpc_port = 0
        self.http_port = 0

    @property
    def url(self) -> str:
        return f"hdfs://127.0.0.1:{self.rpc_port}"

    @property
    def webhdfs(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 120.0) -> str:
        """Start the cluster; returns :attr:`url` once a file can be created, renamed and listed."""
        jars = minicluster_jars()
        classpath = maven.classpath(jars)
        classes = javamain.compiled("KafkaEosMiniHdfs", LAUNCHER, classpath)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rpc_port, self.http_port = free_port(), free_port()
        cmd = [javamain.java(), *HEAP_OPTS, "-Djava.awt.headless=true",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-cp", f"{classes}:{classpath}", "KafkaEosMiniHdfs",
               str(self.directory / "data"), str(self.rpc_port), str(self.http_port)]
        self.launch(cmd, self._ready, timeout, "create, rename and list a file through WebHDFS")
        return self.url

    def _ready(self) -> bool:
        probe = "/.kafka-eos-ready"
        location = self._webhdfs("PUT", f"{probe}/probe", "CREATE", overwrite="true", noredirect="true")["Location"]
        request = urllib.request.Request(location, data=b"ready", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 201:
                return False
        self._webhdfs("DELETE", f"{probe}/renamed", "DELETE")
        renamed = self._webhdfs("PUT", f"{probe}/probe", "RENAME", destination=f"{probe}/renamed")["boolean"]
        listed = self._webhdfs("GET", probe, "LISTSTATUS")["FileStatuses"]["FileStatus"]
        return bool(renamed) and [s["pathSuffix"] for s in listed] == ["renamed"]

    def _webhdfs(self, method: str, path: str, op: str, **params: str) -> dict:
        query = "&".join(f"{k}={v}" for k, v in {"op": op, "user.name": getpass.getuser(), **params}.items())
        request = urllib.request.Request(f"{self.webhdfs}/webhdfs/v1{path}?{query}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")
