"""The file sink's :class:`~kafka_eos_ds.twophase.DecisionLog`: ``_kafka_eos/decision.json``.

The latest decision is replaced atomically (temp file, fsync, ``os.replace``, fsync of
the directory), so a restarted driver reads either the old or the new decision, never
half of one.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Optional

from kafka_eos_ds.filesink.layout import Layout, fsync_dir
from kafka_eos_ds.twophase.protocol import Decision


class FileDecisionLog:
    """The latest commit decision of one sink directory, as a JSON file."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def latest(self) -> Optional[Decision]:
        try:
            text = self.layout.decision.read_text()
        except FileNotFoundError:
            return None
        return Decision.from_json(json.loads(text))

    def write(self, decision: Decision) -> None:
        target = self.layout.decision
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        with open(temp, "w") as f:
            json.dump(decision.to_json(), f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
        fsync_dir(target.parent)
