"""S3 (and S3-compatible stores) through boto3; ``s3a://bucket/key`` and ``s3://`` name
the same objects.

S3 cannot rename, and lists only what is complete: a multipart upload is invisible until
``CompleteMultipartUpload``, which puts the object at its key in one step. So on S3 the
pending state of a file is an upload started and filled by a task, completed by the
driver (:mod:`kafka_eos_ds.table_sink.uploads`). Completing with ``If-None-Match: *`` never
replaces an existing object, and a small file is created only if absent by ``PutObject``
with ``If-None-Match: *`` (both answered 412 when the key is taken; measured on MinIO,
documented by AWS since 2024). A retried completion may answer ``NoSuchUpload`` (MinIO)
or the same success (AWS, SeaweedFS): the caller then checks the object itself.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

from kafka_eos_ds.errors import ConfigError, StorageError
from kafka_eos_ds.storage import StorageOptions

log = logging.getLogger(__name__)

T = TypeVar("T")
_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken")
_CREDENTIALS = ("set the credentials with the options 'fs.s3a.access.key' and 'fs.s3a.secret.key' (or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), and grant this principal read, write, delete and "
                "multipart-upload rights on the bucket")


class S3Store:
    """One bucket; paths are keys (a leading '/' is ignored)."""

    renames = False

    def __init__(self, bucket: str, options: StorageOptions) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError(f"Reading s3a://{bucket} needs the S3 client: pip install 'kafka-eos-ds[s3]' (boto3) in "
                              "the driver's and executors' Python.") from None
        endpoint = options.get("fs.s3a.endpoint")
        if endpoint and "://" not in endpoint:
            ssl = (options.get("fs.s3a.connection.ssl.enabled") or "true").lower() != "false"
            endpoint = ("https://" if ssl else "http://") + endpoint
        path_style = (options.get("fs.s3a.path.style.access") or "").lower() == "true"
        self.bucket = bucket
        self.url = f"s3a://{bucket}"
        self._client = boto3.client(
            "s3", endpoint_url=endpoint or None, region_name=options.get("fs.s3a.endpoint.region"),
            aws_access_key_id=options.get("fs.s3a.access.key"), aws_secret_access_key=options.get("fs.s3a.secret.key"),
            aws_session_token=options.get("fs.s3a.session.token"),
            config=Config(s3={"addressing_style": "path"} if path_style else {},
                          request_checksum_calculation="when_required"))

    # -- small files ------------------------------------------------------------

    def read_text(self, path: str) -> str:
        body = self._call(lambda: self._client.get_object(Bucket=self.bucket, Key=_key(path))["Body"].read(), path)
        return bytes(body).decode("utf-8")

    def list_names(self, path: str) -> list[str]:
        prefix = _key(path).rstrip("/") + "/" if _key(path) else ""
        names: set[str] = set()

        def pages() -> list[Any]:
            return list(self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix,
                                                                               Delimiter="/"))
        for page in self._call(pages, path):
            names.update(o["Key"][len(prefix):] for o in page.get("Contents", ()))
            names.update(p["Prefix"][len(prefix):].rstrip("/") for p in page.get("CommonPrefixes", ()))
        return sorted(n for n in names if n)

    def exists(self, path: str) -> bool:
        return self.metadata(path) is not None or bool(self.list_names(path))

    def metadata(self, path: str) -> dict[str, str] | None:
        """The user metadata of the object at ``path`` (None: no object there)."""
        try:
            head = self._call(lambda: self._client.head_object(Bucket=self.bucket, Key=_key(path)), path)
        except FileNotFoundError:
            return None
        return dict(head.get("Metadata") or {})

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        extra = {"IfNoneMatch": "*"} if new else {}
        self._call(lambda: self._client.put_object(Bucket=self.bucket, Key=_key(path), Body=data, **extra), path)

    def mark_directory(self, path: str) -> None:
        """An empty object at ``path/``: what Hadoop's s3a takes for a directory (its own
        ``mkdirs`` writes the same marker), so that s3a clients see ``path`` as one."""
        self.put(path.rstrip("/") + "/", b"")

    def delete(self, path: str) -> None:
        log.debug("delete %s", path)
        self._call(lambda: self._client.delete_object(Bucket=self.bucket, Key=_key(path)), path)

    def delete_tree(self, path: str) -> None:
        prefix = _key(path).rstrip("/") + "/"

        def delete_all() -> None:
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
                if keys:
                    log.debug("delete %s", ", ".join(k["Key"] for k in keys))
                    self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
        self._call(delete_all, path)

    # -- multipart uploads: the pending state of a file ------------------------------

    def start_upload(self, path: str, metadata: dict[str, str]) -> str:
        answer = self._call(lambda: self._client.create_multipart_upload(Bucket=self.bucket, Key=_key(path),
                                                                         Metadata=metadata), path)
        return str(answer["UploadId"])

    def upload_part(self, path: str, upload: str, number: int, body: bytes) -> str:
        """One part's ETag; FileNotFoundError when the upload was aborted (fenced)."""
        answer = self._call(lambda: self._client.upload_part(Bucket=self.bucket, Key=_key(path), UploadId=upload,
                                                             PartNumber=number, Body=body), path)
        return str(answer["ETag"])

    def complete(self, path: str, upload: str, parts: list[tuple[int, str]]) -> None:
        """Make the upload the object at ``path``: FileExistsError when an object is there
        already (never replaced), FileNotFoundError when the upload is gone (completed
        before, or aborted: the caller looks at the object)."""
        done = {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in parts]}
        log.debug("complete %s (upload %s)", path, upload)
        self._call(lambda: self._client.complete_multipart_upload(Bucket=self.bucket, Key=_key(path), UploadId=upload,
                                                                  MultipartUpload=done, IfNoneMatch="*"), path)

    def abort(self, path: str, upload: str) -> None:
        log.debug("abort %s (upload %s)", path, upload)
        try:
            self._call(lambda: self._client.abort_multipart_upload(Bucket=self.bucket, Key=_key(path),
                                                                   UploadId=upload), path)
        except FileNotFoundError:
            pass  # gone already

    def uploads(self, path: str) -> list[tuple[str, str]]:
        """``(key, upload id)`` of every upload in progress under ``path``. The bucket's
        uploads are listed whole and filtered here: MinIO answers ListMultipartUploads'
        ``Prefix`` only when it is a whole key (measured: the prefix ``t/`` listed nothing,
        the key ``t/dt=1/part-a.parquet`` its upload, no prefix every upload)."""
        prefix = _key(path).rstrip("/") + "/" if _key(path) else ""

        def pages() -> list[Any]:
            return list(self._client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket))
        return [("/" + u["Key"], str(u["UploadId"]))
                for page in self._call(pages, path) for u in page.get("Uploads", ()) if u["Key"].startswith(prefix)]

    def _call(self, call: Callable[[], T], path: str) -> T:
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"s3a://{self.bucket}/{_key(path)}"
        try:
            return call()
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchKey", "NoSuchUpload", "404", "NotFound"):
                raise FileNotFoundError(where) from exc
            if code in ("PreconditionFailed", "412") or status == 412:
                raise FileExistsError(where) from exc
            if code in _DENIED or status == 403:
                raise StorageError(f"S3 refused {where} ({code}): {_CREDENTIALS}.", retriable=False) from exc
            if code == "KeyTooLongError":  # S3 keys are at most 1,024 bytes: asking again cannot help
                raise StorageError(f"S3 refused {where}: the key is longer than S3's 1,024 bytes (shorten the "
                                   "partition values or the path).", retriable=False) from exc
            if code == "NoSuchBucket":
                raise StorageError(f"The bucket of {where} does not exist: create it, or correct 'path'.",
                                   retriable=False) from exc
            raise StorageError(f"S3 call on {where} failed ({code}: {error.get('Message', '')})",
                               retriable=True) from exc
        except BotoCoreError as exc:  # no answer: endpoint down, connection reset, no credentials found
            name = type(exc).__name__
            if name in ("NoCredentialsError", "PartialCredentialsError"):
                raise StorageError(f"No S3 credentials for {where}: {_CREDENTIALS}.", retriable=False) from exc
            raise StorageError(f"S3 call on {where} failed ({name}: {exc})", retriable=True) from exc


def _key(path: str) -> str:
    return path.lstrip("/")
