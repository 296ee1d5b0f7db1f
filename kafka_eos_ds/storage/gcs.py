"""A checkpoint on Google Cloud Storage (``gs://bucket/path``), read through pyarrow's
GCS file system, which the sink already depends on: no further client to install.

Only reading is needed here. The sink reads a query's checkpoint (its id, the batches
Spark committed, a batch's end offsets; :mod:`kafka_eos_ds.storage.checkpoint`), and
Spark writes it with the Hadoop GCS connector. The file sink does not write tables to
``gs://``: its numbered decisions need a small file created only if absent, which
pyarrow's GCS client does not offer (docs/dev/decisions.md, "Filesystem layer").

Settings are the GCS connector's names, as sink options: ``fs.gs.storage.root.url``
(another endpoint than ``https://storage.googleapis.com``, such as an emulator),
``fs.gs.auth.type`` (``UNAUTHENTICATED`` for none; otherwise Google's application default
credentials: ``GOOGLE_APPLICATION_CREDENTIALS`` or the machine's service account),
``fs.gs.project.id``. The connector's key-file option has no pyarrow counterpart; the
sink then asks for ``GOOGLE_APPLICATION_CREDENTIALS`` instead of ignoring it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Callable, TypeVar
from urllib.parse import urlparse

from kafka_eos_ds.errors import ConfigError, StorageError
from kafka_eos_ds.storage import StorageOptions

T = TypeVar("T")
_KEYFILE = "fs.gs.auth.service.account.json.keyfile"
_CREDENTIALS = ("grant the driver's credentials (GOOGLE_APPLICATION_CREDENTIALS, or the machine's service "
                "account) read access to the checkpoint's bucket, or set 'fs.gs.auth.type' to UNAUTHENTICATED "
                "for a bucket that needs none")


class GcsFiles:
    """One bucket's files, read-only; paths are object names (a leading '/' is ignored)."""

    def __init__(self, bucket: str, options: StorageOptions) -> None:
        from pyarrow import fs

        auth = (options.get("fs.gs.auth.type") or "").strip().upper()
        if options.get(_KEYFILE) and auth != "UNAUTHENTICATED":
            raise ConfigError(f"Option '{_KEYFILE}' cannot be used by the sink's own reads of gs://{bucket}: "
                              "point GOOGLE_APPLICATION_CREDENTIALS at that key file in the driver's environment "
                              f"instead, and remove the option from the sink.")
        root = options.get("fs.gs.storage.root.url")
        endpoint = urlparse(root if root and "://" in root else f"https://{root}") if root else None
        self.bucket = bucket
        self.url = f"gs://{bucket}"
        self._fs = fs.GcsFileSystem(anonymous=auth == "UNAUTHENTICATED",
                                    scheme=endpoint.scheme if endpoint else None,
                                    endpoint_override=endpoint.netloc if endpoint else None,
                                    project_id=options.get("fs.gs.project.id"),
                                    retry_time_limit=timedelta(seconds=_RETRY_SECONDS))

    def __repr__(self) -> str:
        return f"GcsFiles({self.url!r})"

    def read_text(self, path: str) -> str:
        def read() -> str:
            with self._fs.open_input_stream(self._name(path)) as f:
                return bytes(f.read()).decode("utf-8")
        return self._call(read, path)

    def list_names(self, path: str) -> list[str]:
        from pyarrow import fs

        infos = self._call(lambda: self._fs.get_file_info(fs.FileSelector(self._name(path), allow_not_found=True)),
                           path)
        return [info.base_name for info in infos]

    def exists(self, path: str) -> bool:
        from pyarrow import fs

        return bool(self._call(lambda: self._fs.get_file_info(self._name(path)), path).type != fs.FileType.NotFound)

    def _name(self, path: str) -> str:
        return f"{self.bucket}/{path.lstrip('/')}".rstrip("/")

    def _call(self, call: Callable[[], T], path: str) -> T:
        where = f"gs://{self._name(path)}"
        try:
            return call()
        except FileNotFoundError:
            raise FileNotFoundError(where) from None
        except OSError as exc:  # pyarrow's GCS errors: the HTTP status and Google's message
            text = str(exc)
            if "PERMISSION_DENIED" in text or "UNAUTHENTICATED" in text or " 401" in text or " 403" in text:
                raise StorageError(f"GCS refused {where}: {_CREDENTIALS}.", retriable=False) from exc
            raise StorageError(f"GCS call on {where} failed: {text}", retriable=True) from exc


# pyarrow retries a failed GCS call for this long (its default is 15 minutes): the sink's
# own steps retry with their budget (docs/fault-tolerance.md), so one call should not eat it.
_RETRY_SECONDS = 20.0
