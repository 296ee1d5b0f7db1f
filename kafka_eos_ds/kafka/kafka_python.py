"""The one adapter over kafka-python's private API, with the version it was written for.

kafka-python's public admin client has no call that sends an arbitrary request to a
transaction or group coordinator, which EndTxn, InitProducerId, AddOffsetsToTxn and
TxnOffsetCommit need. Its internals do (``_find_coordinator_id``, ``_manager``); they are
used here and nowhere else, and only on the kafka-python line they were checked against.
"""

from __future__ import annotations

import re
from typing import Any

from kafka_eos_ds.errors import KafkaClientError

SUPPORTED = ">=3.0.10,<4"
_LOWEST, _BELOW = (3, 0, 10), (4,)


def check_version(version: str) -> None:
    """KafkaClientError naming the fix unless ``version`` is a supported kafka-python."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:3])
    if not _LOWEST <= parts < _BELOW:
        raise KafkaClientError(
            f"kafka_eos needs kafka-python {SUPPORTED} for its transaction-coordinator calls (it uses that "
            f"line's internal API); installed: {version}. Install it with: pip install 'kafka-python{SUPPORTED}'.")


class CoordinatorChannel:
    """Requests to the coordinator of a transactional id or a group, over a kafka-python
    ``KafkaAdminClient``."""

    def __init__(self, admin: Any) -> None:
        import kafka

        check_version(kafka.__version__)
        self._admin = admin

    def send(self, key: str, request: Any, *, group: bool) -> Any:
        """Send ``request`` to the coordinator of ``key`` and return its response; kafka-python's
        errors are raised as they are (the caller translates them)."""
        admin = self._admin
        kind = self._kind(group)

        async def go() -> Any:
            coord = await admin._find_coordinator_id(key, key_type=kind)
            return await admin._manager.send(request, node_id=coord)

        return admin._manager.run(go)

    def forget(self, key: str, *, group: bool) -> None:
        """Drop the cached coordinator of ``key``: after a move the cached node is wrong."""
        from kafka.protocol.metadata import CoordinatorType

        kind = self._kind(group)
        coords = getattr(self._admin._manager.cluster, "_coordinators", None)
        if isinstance(coords, dict):
            coords.pop((kind, key), None)
            coords.pop((CoordinatorType.build_from(kind), key), None)

    def api_version(self, request_class: Any) -> int:
        """The highest version of ``request_class`` the cluster serves (-1: unknown)."""
        try:
            return int(self._admin._manager.broker_version_data.api_version(request_class))
        except Exception:  # an old broker without the API, or no version data yet
            return -1

    @staticmethod
    def _kind(group: bool) -> Any:
        from kafka.protocol.metadata import CoordinatorType

        return CoordinatorType.GROUP if group else CoordinatorType.TRANSACTION
