"""The ``full`` marker in this directory follows the project's rule (integration/conftest.py):
tests marked ``full`` run only with KAFKA_EOS_CHAOS_PROFILE=full and are reported as
deselected otherwise (the gate runs a bounded number of schedules; the full profile many)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KAFKA_EOS_CHAOS_PROFILE", "reduced") == "full":
        return
    here = os.path.dirname(__file__)
    mine = [item for item in items if item.get_closest_marker("full") and str(item.fspath).startswith(here)]
    if mine:
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if item not in mine]
