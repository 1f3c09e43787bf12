"""Wait for events committed to a PostgreSQL log: ``LISTEN`` on the ``event`` trigger's channel.

The log's ``event_notify`` trigger (``pgschema.PG_ONLY``) notifies ``NOTIFY_CHANNEL`` with the
newest event id of each committed insert. A ``Listener`` holds one connection of its own (a
listening connection must not run the reader's queries: a notification arrives only between
them) and answers "has anything been committed since I last asked?".

What a notification promises: an event with that id is committed and visible to a new query.
What it does not: that every commit is notified while the connection is down. After
``connect()`` the caller must read once (what was committed before ``LISTEN`` took effect is not
notified), and a lost connection raises ``LogError``: reconnect, then read again.

Qt-free: the monitor's tailer runs it in a thread; a script can run it in a loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from steplog.errors import LogError
from steplog.log.pgschema import NOTIFY_CHANNEL

if TYPE_CHECKING:
    from steplog.log.location import PgUrl


class Listener:
    """One ``LISTEN`` connection to ``url`` (on ``channel``: by default the ``event`` trigger's;
    ``QUEUE_CHANNEL`` for a worker, whose notifications carry run ids); not thread-safe (one
    thread owns it)."""

    def __init__(self, url: PgUrl, channel: str = NOTIFY_CHANNEL) -> None:
        self.url = url
        self.channel = channel
        self._raw: Any = None

    @property
    def connected(self) -> bool:
        return self._raw is not None and not self._raw.closed

    def connect(self) -> None:
        """Connect and ``LISTEN`` (``LogError`` if the server cannot be reached)."""
        from steplog.log.pg import connect

        self.close()
        conn = connect(self.url)
        try:
            conn.execute(f"LISTEN {self.channel}")
        except Exception as exc:
            conn.close()
            raise LogError(f"cannot listen for events on {self.url} ({exc})") from exc
        self._raw = conn._raw  # notifications are read on the psycopg connection itself

    def wait(self, timeout: float) -> int | None:
        """The newest event id notified within ``timeout`` seconds (several notifications that are
        already there are read at once, the highest id kept; 0 on a channel whose payloads are
        not ids), or ``None`` if none came.
        ``LogError`` if the connection is lost (it is closed: ``connect()`` again)."""
        import psycopg

        if self._raw is None:
            raise LogError(f"not listening on {self.url}")
        newest: int | None = None
        try:
            for note in self._raw.notifies(timeout=timeout, stop_after=1):
                newest = _id(note.payload, newest)
            if newest is not None:  # drain what else is queued without waiting again
                for note in self._raw.notifies(timeout=0):
                    newest = _id(note.payload, newest)
        except psycopg.Error as exc:
            self.close()
            first = str(exc).strip().splitlines()
            raise LogError(
                f"lost the connection to {self.url} ({first[0] if first else type(exc).__name__})"
            ) from exc
        return newest

    def close(self) -> None:
        if self._raw is not None:
            try:
                self._raw.close()
            finally:
                self._raw = None


def _id(payload: str, newest: int | None) -> int:
    value = int(payload) if payload.isdigit() else 0
    return value if newest is None else max(newest, value)
