"""The driver process's clients (the transaction-coordinator client, the sink's metadata
client, the commit log's two readers), kept from one driver step to the next.

Spark runs a query's driver steps (the planner's recovery, each batch's commit, an abort)
in Python workers that it keeps for later steps (``spark.python.worker.reuse``, on by
default: pyspark's daemon forks a worker and hands it the next request of the same kind).
A step that built its own coordinator client paid, every time, the client's bootstrap
(a connection and a metadata request), a FindCoordinator per transactional id and a
connection to each coordinator; over TLS or SASL each connection adds its handshake.
A client kept by the process answers the next step from warm connections and its cache
of coordinators (a coordinator that moved is dropped from that cache by the first call
that finds it moved, as within one step).

Only the client is kept (the sink reads its broker list again when a step takes it),
never anything a step decided with: each step still builds its
own decision log and fences the decision writer first (docs/dev/decisions.md, "One
coordinator client per driver process").

A client is never handed out again after any doubt: a step that raised closes its client
(the next step starts a new one); a client older than ``max_age_s`` is closed instead of
being reused (certificates, tokens and addresses are read again); clients beyond
``capacity`` are closed, least recently used first; a client built before a fork belongs
to the parent process and is left to it. What is left is closed at interpreter exit.
(Spark's forked workers leave with ``os._exit``, which skips that: their sockets close
with the process.)
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TypeVar

T = TypeVar("T")


@dataclass
class _Kept:
    client: Any
    born: float  # when it was built (clock of the sessions)
    pid: int


def fingerprint(conf: Mapping[str, Any]) -> str:
    """One digest of a client's settings: equal settings, equal digest. A digest, so the
    secrets in the settings are not held a second time as readable keys."""
    text = json.dumps(sorted((str(k), repr(v)) for k, v in conf.items()))
    return hashlib.sha256(text.encode()).hexdigest()


class ClientSessions:
    """Clients kept between the steps of one process, one per (factory, settings).

    Parameters
    ----------
    capacity : int
        How many clients are kept at most (a process serves the steps of a few sinks, two
        clients each).
    max_age_s : float
        A client is not reused once this old.
    clock : callable
        Seconds, monotonic (a test hands in its own).
    """

    def __init__(self, capacity: int = 8, max_age_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = max(1, capacity)
        self.max_age_s = max_age_s
        self._clock = clock
        self._kept: OrderedDict[tuple[Any, str], _Kept] = OrderedDict()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, conf: Mapping[str, Any], factory: Callable[[Mapping[str, Any]], T],
                start: Callable[[Callable[[], T]], T] | None = None,
                on_reuse: Callable[[T], None] | None = None, kind: Any = None) -> Iterator[T]:
        """A client of ``factory`` for ``conf``: the one kept from an earlier step (after
        ``on_reuse(client)``; if that raises, the client is closed and replaced), or a new
        one (built through ``start(build)``, e.g. with the caller's retries). One step
        holds it at a time; it is kept again when the step ends without an error and
        closed when the step raises. ``kind`` (default: ``factory``) names what is built,
        where the factory is a bound method built anew by every step."""
        key = (factory if kind is None else kind, fingerprint(conf))
        kept = self._take(key)
        if kept is not None and on_reuse is not None:
            try:
                on_reuse(kept.client)
            except Exception:
                _close(kept.client)
                kept = None
        if kept is None:
            client = start(lambda: factory(conf)) if start is not None else factory(conf)
            kept = _Kept(client, self._clock(), os.getpid())
        try:
            yield kept.client
        except BaseException:
            _close(kept.client)
            raise
        self._keep(key, kept)

    def close(self) -> None:
        """Close every kept client (at interpreter exit, and for tests)."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), OrderedDict()
        for k in kept:
            if k.pid == os.getpid():
                _close(k.client)

    def __len__(self) -> int:
        return len(self._kept)

    def _take(self, key: tuple[Any, str]) -> _Kept | None:
        with self._lock:
            kept = self._kept.pop(key, None)
        if kept is None or kept.pid != os.getpid():
            return None  # another process's client: its sockets are not ours to use or close
        if self._clock() - kept.born >= self.max_age_s:
            _close(kept.client)
            return None
        return kept

    def _keep(self, key: tuple[Any, str], kept: _Kept) -> None:
        surplus = []
        with self._lock:
            if key in self._kept:
                surplus.append(kept)  # a concurrent step kept its own first
            else:
                self._kept[key] = kept
            while len(self._kept) > self.capacity:
                surplus.append(self._kept.popitem(last=False)[1])
        for k in surplus:
            _close(k.client)


def _close(client: Any) -> None:
    try:
        client.close()
    except Exception:  # closing must never mask the step's own outcome
        pass


SESSIONS = ClientSessions()
atexit.register(SESSIONS.close)
