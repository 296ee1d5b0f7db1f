"""The file sink's options, checked on the driver before anything is written."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import unquote, urlparse

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.filesink.layout import EXTENSIONS, Layout
from kafka_eos_ds.options import Options
from kafka_eos_ds.storage import StorageOptions

FILE_FORMATS = tuple(EXTENSIONS)
_SUPPORTED = ("a local directory path (/data/out, relative paths are resolved on the driver) or a file: URI "
              "(file:///data/out); the sink writes with Python's os module, so every Spark executor must "
              "see the same directory (one machine, or a shared mount)")


@dataclass(frozen=True)
class FileSinkConfig:
    """``path`` (a local directory), ``fileFormat`` (parquet | jsonl), ``commitTimeoutMs``,
    and a stream's ``checkpointLocation`` (where its query id is read)."""

    root: Path
    file_format: str
    commit_timeout_s: float
    checkpoint: Optional[str] = None  # a streaming query's checkpointLocation (Spark passes it)
    storage: StorageOptions = StorageOptions()  # how to read it (Hadoop's fs.* names)

    @property
    def layout(self) -> Layout:
        return Layout(self.root, EXTENSIONS[self.file_format])

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "FileSinkConfig":
        opts = Options(options)
        raw = opts.require("path", "Set .option('path', DIR) (or .save(DIR) / .start(DIR)) to the output "
                                   f"directory: {_SUPPORTED}.")
        file_format = opts.get_choice("fileFormat", FILE_FORMATS, "parquet")
        timeout_ms = opts.get_int("commitTimeoutMs", 120_000, minimum=1000) or 120_000
        return cls(local_path(raw), file_format, timeout_ms / 1000, opts.get("checkpointLocation"),
                   StorageOptions.from_options(options))


def local_path(raw: str) -> Path:
    """The directory ``raw`` names, or ConfigError('path') if Python cannot write it directly."""
    parsed = urlparse(raw)
    if not parsed.scheme:
        return Path(os.path.abspath(raw))
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"Option 'path' = {raw!r} names host {parsed.netloc!r}; only local file: URIs are "
                              f"supported ({_SUPPORTED}).")
        return Path(os.path.abspath(unquote(parsed.path)))
    raise ConfigError(f"Option 'path' = {raw!r} uses the scheme {parsed.scheme!r}, which the file sink cannot "
                      f"write with atomic renames. Supported: {_SUPPORTED}.")


def check_writable(layout: Layout) -> None:
    """Create the staging directory; a path that cannot be written is the user's 'path' error."""
    if layout.root.exists() and not layout.root.is_dir():
        raise ConfigError(f"Option 'path' = '{layout.root}' is a file, not a directory; name a directory.")
    try:
        layout.staging.mkdir(parents=True, exist_ok=True)
        probe = layout.staging / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"Option 'path' = '{layout.root}' cannot be written ({exc.strerror}); choose a "
                          "directory this user may create files in.") from exc
