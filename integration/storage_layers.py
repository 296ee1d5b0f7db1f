"""Which Python filesystem layer can do what the table sink needs: measured against
the storage servers (``python -m integration.storage_layers``; the embedded servers
start unless ``KAFKA_EOS_HDFS`` / ``KAFKA_EOS_S3_ENDPOINT`` name existing ones).

Each check runs the same operation through each library and records what happened;
the table it prints is the evidence behind the choice in docs/dev/decisions.md. A check
that raises is recorded as "no" with the exception's first line; "(API)" marks what a
library has no call for at all, read from its API rather than run. s3fs and obstore are
not project dependencies: ``pip install s3fs obstore`` to compare them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from integration import storage

Check = Callable[[], Any]

ENV = "endpoint and keys from the environment"
OPTIONS = "endpoint and keys as options"
DEFERRED = "multipart: parts now, completion later"
ACROSS = "multipart: completed by another process"
RENAME = "rename"


def _outcome(check: Check) -> str:
    try:
        value = check()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:90]
        return f"no: {type(exc).__name__}: {first}"
    return "yes" if value is True else f"{value}"


def hdfs_checks(hdfs: storage.HdfsUnderTest) -> dict[str, dict[str, Check]]:
    host_port = hdfs.url.split("://", 1)[1]
    base = f"/kafka-eos-layers/{uuid.uuid4().hex[:8]}"

    def native() -> dict[str, Check]:
        import hdfs_native

        client = hdfs_native.Client(hdfs.url)

        def write_rename_list() -> bool:
            client.mkdirs(f"{base}/n", create_parent=True)
            with client.create(f"{base}/n/pending") as out:
                out.write(b"x")
            client.rename(f"{base}/n/pending", f"{base}/n/final", overwrite=False)
            return [s.path.rsplit("/", 1)[-1] for s in client.list_status(f"{base}/n")] == ["final"]

        def refuses_overwrite() -> bool:
            with client.create(f"{base}/n/pending2") as out:
                out.write(b"y")
            try:
                client.rename(f"{base}/n/pending2", f"{base}/n/final", overwrite=False)
            except FileExistsError:
                return True
            return False

        return {"hdfs:// without Hadoop or libhdfs": write_rename_list,
                "rename refuses to overwrite": refuses_overwrite}

    def fsspec_native() -> dict[str, Check]:
        import fsspec

        fs = fsspec.filesystem("hdfs", host=host_port.split(":")[0], port=int(host_port.split(":")[1]))

        def write_rename_list() -> bool:
            fs.pipe_file(f"{base}/f/pending", b"x")
            fs.mv(f"{base}/f/pending", f"{base}/f/final")
            return [p.rsplit("/", 1)[-1] for p in fs.ls(f"{base}/f", detail=False)] == ["final"]

        def refuses_overwrite() -> bool:
            fs.pipe_file(f"{base}/f/pending2", b"y")
            try:
                fs.mv(f"{base}/f/pending2", f"{base}/f/final")
            except FileExistsError:
                return True
            return False

        return {"hdfs:// without Hadoop or libhdfs": write_rename_list,
                "rename refuses to overwrite": refuses_overwrite}

    def pyarrow_fs() -> dict[str, Check]:
        def connect() -> bool:
            from pyarrow import fs

            hadoop = fs.HadoopFileSystem(host_port.split(":")[0], int(host_port.split(":")[1]))
            hadoop.create_dir(f"{base}/a")
            return True

        return {"hdfs:// without Hadoop or libhdfs": connect,
                "rename refuses to overwrite": lambda: "not reached (no connection)"}

    return {"hdfs-native": native(), "fsspec + hdfs-native": fsspec_native(), "pyarrow.fs": pyarrow_fs(),
            "obstore": {"hdfs:// without Hadoop or libhdfs": lambda: "no (API): no hdfs:// store"}}


_SECOND_PROCESS_COMPLETE = """
import json, sys, boto3
from botocore.config import Config
a = json.loads(sys.argv[1])
s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}))
s3.complete_multipart_upload(Bucket=a["bucket"], Key=a["key"], UploadId=a["upload_id"],
                             MultipartUpload={"Parts": a["parts"]})
"""


def s3_checks(s3: storage.S3UnderTest) -> dict[str, dict[str, Check]]:
    bucket = s3.new_bucket()
    os.environ.update(s3.environment())  # what "credentials from the environment" means below
    endpoint, region = s3.endpoint, s3.region
    key, secret = s3.access_key or "", s3.secret_key or ""

    def boto() -> dict[str, Check]:
        import json

        import boto3
        from botocore.config import Config

        path_style = Config(s3={"addressing_style": "path"})

        def from_env() -> bool:
            boto3.client("s3", config=path_style).put_object(Bucket=bucket, Key="boto/env", Body=b"x")
            return True

        def from_options() -> bool:
            client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, region_name=region, aws_access_key_id=key, aws_secret_access_key=secret,
                config=path_style)
            return client.get_object(Bucket=bucket, Key="boto/env")["Body"].read() == b"x"

        def multipart_across_processes() -> bool:
            client = boto3.client("s3", config=path_style)
            upload = client.create_multipart_upload(Bucket=bucket, Key="boto/mpu")["UploadId"]
            etag = client.upload_part(Bucket=bucket, Key="boto/mpu", UploadId=upload, PartNumber=1, Body=b"p")["ETag"]
            listed = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="boto/mpu").get("Contents", [])]
            args = {"bucket": bucket, "key": "boto/mpu", "upload_id": upload,
                    "parts": [{"PartNumber": 1, "ETag": etag}]}
            subprocess.run([sys.executable, "-c", _SECOND_PROCESS_COMPLETE, json.dumps(args)], check=True,
                           capture_output=True, timeout=120)
            after = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="boto/mpu").get("Contents", [])]
            return listed == [] and after == ["boto/mpu"]

        return {ENV: from_env, OPTIONS: from_options, DEFERRED: lambda: "yes (the calls themselves)",
                ACROSS: multipart_across_processes, RENAME: lambda: "no rename in S3 (copy + delete)"}

    def s3fs_layer() -> dict[str, Check]:
        import s3fs

        def from_env() -> bool:
            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            fs.pipe_file(f"{bucket}/s3fs/env", b"x")
            return True

        def from_options() -> bool:
            fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=endpoint, skip_instance_cache=True,
                                   client_kwargs={"region_name": region})
            return fs.cat_file(f"s3a://{bucket}/s3fs/env") == b"x"

        def deferred() -> bool:
            fs = s3fs.S3FileSystem(skip_instance_cache=True)
            f = fs.open(f"{bucket}/s3fs/mpu", "wb", autocommit=False)
            f.write(b"p")
            f.close()  # parts uploaded, upload not completed
            hidden = not fs.exists(f"{bucket}/s3fs/mpu")
            f.commit()  # the upload id lives in this file object only
            fs.invalidate_cache()
            return hidden and fs.exists(f"{bucket}/s3fs/mpu")

        return {ENV: from_env, OPTIONS: from_options, DEFERRED: deferred,
                ACROSS: lambda: "no (API): no public call completes an upload id it did not start",
                RENAME: lambda: "mv = copy + delete"}

    def pyarrow_layer() -> dict[str, Check]:
        from pyarrow import fs

        def write_read(s3: Any, name: str) -> bool:
            with s3.open_output_stream(f"{bucket}/arrow/{name}") as out:
                out.write(b"x")
            with s3.open_input_stream(f"{bucket}/arrow/{name}") as source:
                return source.read() == b"x"

        def from_env() -> bool:
            return write_read(fs.S3FileSystem(), "env")  # AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...

        def keys_from_env() -> str:
            ok = write_read(fs.S3FileSystem(endpoint_override=endpoint, region=region), "env-keys")
            return f"keys from the environment with endpoint_override: {'yes' if ok else 'no'}"

        def from_options() -> bool:
            return write_read(fs.S3FileSystem(access_key=key, secret_key=secret, endpoint_override=endpoint,
                                              region=region), "options")

        return {ENV: from_env, ENV + " (keys only)": keys_from_env, OPTIONS: from_options,
                DEFERRED: lambda: "no (API): open_output_stream completes on close",
                ACROSS: lambda: "no (API)",
                RENAME: lambda: "move = copy + delete"}

    def obstore_layer() -> dict[str, Check]:
        import obstore
        from obstore.store import S3Store

        def from_env() -> bool:
            # object_store refuses http:// endpoints unless allowed.
            store = S3Store(bucket, config={"allow_http": "true"})
            obstore.put(store, "obstore/env", b"x")
            return True

        def from_options() -> bool:
            store = S3Store(bucket, endpoint=endpoint, region=region, access_key_id=key, secret_access_key=secret,
                            client_options={"allow_http": True})
            return bytes(obstore.get(store, "obstore/env").bytes()) == b"x"

        return {ENV: from_env, OPTIONS: from_options,
                DEFERRED: lambda: "no (API): put()/open_writer() complete themselves",
                ACROSS: lambda: "no (API)", RENAME: lambda: "rename = copy + delete"}

    return {"boto3": boto(), "s3fs (fsspec)": s3fs_layer(), "pyarrow.fs": pyarrow_layer(), "obstore": obstore_layer()}


def main() -> int:
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="kafka-eos-layers-") as work:
        hdfs = stack.enter_context(_session(storage.hdfs_server(Path(work, "hdfs"))))
        s3 = stack.enter_context(_session(storage.s3_server(Path(work, "minio"))))
        print(f"hdfs: {hdfs.kind} {hdfs.url}; s3: {s3.kind} {s3.endpoint}")
        for title, layers in (("HDFS", hdfs_checks(hdfs)), ("S3", s3_checks(s3))):
            print(f"\n{title}")
            for layer, checks in layers.items():
                for name, check in checks.items():
                    print(f"| {layer} | {name} | {_outcome(check)} |", flush=True)
    return 0


def _session(generator):
    """A fixture generator as a context manager."""
    from contextlib import contextmanager

    @contextmanager
    def managed():
        value = next(generator)
        try:
            yield value
        finally:
            generator.close()

    return managed()


if __name__ == "__main__":
    sys.exit(main())
