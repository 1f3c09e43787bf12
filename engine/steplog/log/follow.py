"""A log as a reader outside its engines sees it (the monitor): how to hear of new commits, and
how to name the log to a person. The log chooses; the reader asks, with no ``if`` of its own on
which database holds the log.

How commits are heard of (``notifier``):

- a file log announces nothing. Its file and ``-wal`` change on every commit: a *hint*, which
  can come before the commit is visible to a reader (read at once and again shortly), and
  ``LogRepository.data_version`` is the cheap "anything new?" to poll between hints;
- a database log on a server announces each commit with the newest event id
  (``pglisten.Listener``): a reader listens on its own connection and polls nothing. A
  notification is sent after the commit, so it is never early; after (re)connecting the reader
  reads once, since what was committed meanwhile was announced to nobody.

Qt-free and watcher-free: the reader brings its own file watcher and thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from steplog.log.location import LogLocation, PgUrl, resolve

WHERE = "a file or a postgresql:// URL"
"""What names a log (``--db``), for a reader's own help text."""
KINDS = "SQLite or PostgreSQL"
"""What can hold a log, in a sentence about steplog."""
FILE_FILTER = "SQLite logs (*.db *.sqlite *.sqlite3);;All files (*)"
"""A file dialog's filter for choosing a log file."""


class Announcements(Protocol):
    """A connection of its own on which the log announces commits (``pglisten.Listener``); one
    thread owns it."""

    @property
    def connected(self) -> bool: ...

    def connect(self) -> None:
        """Connect and start listening (``LogError`` if the log cannot be reached)."""

    def wait(self, timeout: float) -> int | None:
        """The newest event id announced within ``timeout`` seconds, or ``None``; ``LogError``
        when the connection is lost (``connect()`` again)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Notifier:
    """How a reader of one log hears that something was committed."""

    hint_files: tuple[Path, ...] = ()
    """Files that change on every commit: watch them if you can (a change is a hint, maybe
    early). Empty: the log has no files to watch."""
    announcements: Announcements | None = None
    """The log announces its commits here: listen, and poll nothing. ``None``: poll
    ``data_version`` (and follow ``hint_files``)."""
    live: str = ""
    """How it is followed, for a status line ("following URL live (LISTEN …)"); '' when there
    is nothing worth saying (a file, watched and polled)."""

    @property
    def announces(self) -> bool:
        return self.announcements is not None


def notifier(location: LogLocation) -> Notifier:
    """How to hear of commits to the log at ``location`` (connects to nothing yet)."""
    if isinstance(location, PgUrl):
        from steplog.log.pglisten import Listener
        from steplog.log.pgschema import NOTIFY_CHANNEL

        return Notifier(
            announcements=Listener(location),
            live=f"following {location} live (LISTEN {NOTIFY_CHANNEL})",
        )
    path = Path(location)
    return Notifier(hint_files=(path, Path(f"{path}-wal")))


def claimable_notices(location: LogLocation) -> Announcements | None:
    """Where a worker hears that a run became claimable (submitted, retried, handed back), to
    claim it at once instead of at its next poll: a listener on the log's own connection, or
    ``None`` for a log that announces nothing (a file: poll). A notice is a hint (another worker
    may claim the run first), and none comes while the connection is down: keep polling."""
    if isinstance(location, PgUrl):
        from steplog.log.pglisten import Listener
        from steplog.log.pgschema import QUEUE_CHANNEL

        return Listener(location, QUEUE_CHANNEL)
    return None


def locate(db: str | os.PathLike[str] | None) -> LogLocation:
    """The log a reader is pointed at (``--db``, else ``$STEPLOG_DB``, else the default), ready
    to follow: a file made absolute (it may not exist yet: a run will create it); a database on
    a server asked at once whether it is there and holds a log, so an unreachable server or a
    foreign database is one line now (``SteplogError``), not a window that waits for nothing."""
    where = resolve(db)
    if isinstance(where, PgUrl):
        from steplog.log.db import inspect

        inspect(where)
        return where
    return where.resolve()
