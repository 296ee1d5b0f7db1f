"""The file sink's :class:`~kafka_eos_ds.twophase.DecisionLog`: one ``decision.json`` per
writer, in the writer's staging directory (:mod:`.layout`).

A decision is replaced atomically (temp file, fsync, ``os.replace``, fsync of the
directory), so a restarted driver reads either the old or the new decision, never half
of one.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Optional

from kafka_eos_ds.filesink.layout import DECISION, IN_PROGRESS, PENDING, Layout, fsync_dir
from kafka_eos_ds.twophase.protocol import DECIDED, Decision


class FileDecisionLog:
    """The latest commit decision of each writer of one sink directory, as JSON files."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def latest(self, key: str) -> Optional[Decision]:
        return _read(self.layout.decision(key))

    def latest_of(self, kind: str) -> Optional[Decision]:
        found = [(path.stat().st_mtime_ns, path) for path in self._decisions(kind)]
        return _read(max(found)[1]) if found else None

    def unfinished(self, kind: str) -> list[tuple[str, Decision]]:
        out = []
        for path in self._decisions(kind):
            decision = _read(path)
            if decision is not None and decision.state == DECIDED:
                out.append((f"{kind}:{decision.query_id}", decision))
        return out

    def write(self, key: str, decision: Decision) -> None:
        target = self.layout.decision(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        with open(temp, "w") as f:
            json.dump({"key": key, **decision.to_json()}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
        fsync_dir(target.parent)

    def forget(self, key: str) -> None:
        """Drop the writer's decision and its staging directory once empty (a finished job:
        one directory per job would pile up)."""
        target = self.layout.decision(key)
        target.unlink(missing_ok=True)
        for directory in (target.parent / IN_PROGRESS, target.parent / PENDING, target.parent):
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError:
                break  # not empty: the writer still has files there
        if self.layout.staging.exists():
            fsync_dir(self.layout.staging)

    def _decisions(self, kind: str) -> list[Path]:
        if not self.layout.staging.is_dir():
            return []
        return [d / DECISION for d in self.layout.staging.iterdir()
                if d.name.startswith(kind) and (d / DECISION).is_file()]


def _read(path: Path) -> Optional[Decision]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return Decision.from_json(json.loads(text))

