"""How a waiting engine hears that something it may wait for was committed (a signal, a message,
an event), as a reader does (``follow``): the cheap "anything new?" asked between looks.

- a file log: ``PRAGMA data_version`` on the engine's own connection, which changes whenever
  another connection committed (one page read, no query);
- a PostgreSQL log: a ``LISTEN`` connection of its own (``pglisten.Listener``) on the ``event``
  trigger's channel: every signal, message or step sent or committed inserts an event.

A ring is a hint (the commit may be another run's): the waiter looks, and looks anyway every
``LOOK_ANYWAY_SECONDS`` (a lost connection, a notification missed while reconnecting).
"""

from __future__ import annotations

import time

from steplog.errors import SteplogError
from steplog.log.connection import LogConnection
from steplog.log.follow import Announcements, notifier
from steplog.log.location import LogLocation, PgUrl

LOOK_ANYWAY_SECONDS = 1.0


class Doorbell:
    """Rings when something may have been committed to the log; connects nothing until asked."""

    def __init__(self, conn: LogConnection, location: LogLocation | None) -> None:
        self._conn = conn
        self._listener: Announcements | None = (
            notifier(location).announcements if isinstance(location, PgUrl) else None
        )
        self._file = location is not None and not isinstance(location, PgUrl)
        self._version: object = None
        self._looked = 0.0

    def rang(self) -> bool:
        """Whether to look again now: something may have been committed since the last ring."""
        now = time.monotonic()
        if now - self._looked >= LOOK_ANYWAY_SECONDS:
            self._looked = now
            self._peek()  # and take what is pending now as heard
            return True
        if self._peek():
            self._looked = now
            return True
        return False

    def _peek(self) -> bool:
        listener = self._listener
        if listener is not None:
            try:
                if not listener.connected:
                    listener.connect()
                    return True  # what was committed before LISTEN took effect was not heard
                return listener.wait(0) is not None
            except SteplogError:
                return True  # no announcements for now: look every time
        if not self._file:
            return True  # a log this doorbell cannot watch: look every time
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        changed = bool(version != self._version)
        self._version = version
        return changed

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
