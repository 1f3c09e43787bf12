"""Which database a log is on, asked once: the backend, chosen from the location.

DBOS keeps one system-database class with a SQLite and a PostgreSQL subclass, so "which
database" is one object, never an ``if``. Here ``Backend`` names everything that differs between
a log in a SQLite file and one in a PostgreSQL database; ``sqlite.SqliteBackend`` and
``pg.PostgresBackend`` are the two, and each is one object (``SQLITE``, ``POSTGRES``).

There are two ways to get it, and they are the only places that look at which database it is:

- ``backend_for(location)``: from where the log is (a ``Path`` or a ``PgUrl``, as ``--db`` is
  parsed by ``location.parse``); what opening a log asks (``db.open_log`` and the rest).
- ``backend_of(conn)``: from a connection to it, or an error one raised; what a query asks (the
  JSON forms, a row lock, how far the events are settled). A PostgreSQL connection and its errors
  carry theirs; anything without one (``sqlite3``'s own) is SQLite's.

The SQL the engine runs is written once, SQLite-flavoured, against ``connection.LogConnection``
(``pg.PgConnection`` speaks it on PostgreSQL); a backend holds only what cannot be said that way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from steplog.log.connection import LogConnection, Synchronous
from steplog.log.jsonsql import JsonSql
from steplog.log.location import LogLocation, PgUrl
from steplog.log.space import Space
from steplog.log.sqlite import SQLITE

if TYPE_CHECKING:
    from sqlalchemy import Engine


class Backend(Protocol):
    """What a log's database does its own way. Locations are what ``location.parse`` makes."""

    json: JsonSql
    """How SQL reads a field of an event's JSON ``data`` (``jsonsql``)."""
    is_server: bool
    """A database server that many hosts may share (PostgreSQL), not a file on this machine."""
    notifies_commits: bool
    """Readers learn of commits from the log's notifications, not by polling the file."""
    space: Space
    """The room the log takes, and how ``steplog prune`` gives freed room back."""
    like_any_case: str
    """The operator that matches a ``LIKE`` pattern in any (ASCII) case: SQLite's ``LIKE`` is
    so already (and a ``lower()`` per column made a search of 100,000 runs 5x slower),
    PostgreSQL's is ``ILIKE``."""

    # -- opening -------------------------------------------------------------------------------

    def load_driver(self) -> None:
        """Import what opening this log takes (before the engine takes over the stop signals)."""
        ...

    def inspect(self, location: str | os.PathLike[str]) -> int:
        """Check the log read-only: its schema version (0: empty, new). Refuses foreign, damaged
        and newer ones (``LogError``); never writes."""
        ...

    def open_log(
        self, location: str | os.PathLike[str], *, synchronous: Synchronous
    ) -> LogConnection:
        """Open (creating if needed) the log for writing: validated, migrated."""
        ...

    def open_readonly(self, location: str | os.PathLike[str], *, one_shot: bool) -> LogConnection:
        """Open an existing log for reading only (``one_shot``: a command's reader, closed soon)."""
        ...

    def connect_plain(self, location: str | os.PathLike[str]) -> LogConnection:
        """A second connection to a log already opened and checked (the lease heartbeat's), at
        ``synchronous = NORMAL``."""
        ...

    def open_follower(self, location: str | os.PathLike[str]) -> LogConnection | None:
        """A read-only connection to a log an engine is about to create, or ``None`` until it is
        there (the kill test's watch)."""
        ...

    def not_ready(self, location: str | os.PathLike[str]) -> str | None:
        """Why a reader must wait (the log is there but no engine has made its schema), or
        ``None``."""
        ...

    def file_of(self, location: str | os.PathLike[str]) -> Path | None:
        """The file the log is, if it is one (a reader watches it being deleted or replaced)."""
        ...

    def hand_over(self, location: str | os.PathLike[str]) -> tuple[list[str], dict[str, str]]:
        """How a child process is told where the log is: arguments, environment variables."""
        ...

    def read_engine(self, location: str | os.PathLike[str]) -> Engine:
        """A SQLAlchemy engine that can only read the log (``tables``, ``history``)."""
        ...

    # -- on a connection ----------------------------------------------------------------------

    def has_column(self, conn: LogConnection, table: str, column: str) -> bool:
        """Does ``table`` have ``column`` (an older log read without migrating it may not)?"""
        ...

    def primary_key(self, conn: LogConnection, table: str) -> list[str]:
        """``table``'s primary key columns, in key order."""
        ...

    def columns(self, conn: LogConnection, table: str) -> list[str]:
        """``table``'s columns, in table order."""
        ...

    def new_ids(self, conn: LogConnection, table: str) -> str | None:
        """The column of ``table`` whose values the database makes up (an id that only grows:
        ``INTEGER PRIMARY KEY`` on SQLite, an identity column on PostgreSQL), if it has one."""
        ...

    def for_update(self, *, skip_locked: bool = False) -> str:
        """The row-locking clause for a ``SELECT`` in a write transaction."""
        ...

    def lock_run(self, conn: LogConnection, run_id: str) -> None:
        """Lock one run, which may not exist yet, for the rest of the write transaction, against
        every other transaction that locks it so (``db.run_locked``)."""
        ...

    def announce_claimable(self, conn: LogConnection, run_id: str) -> None:
        """Tell the workers waiting for work (``follow.claimable_notices``) that ``run_id`` may
        be claimed, once the caller's write transaction commits."""
        ...

    def settled_upto(self, conn: LogConnection) -> int | None:
        """The event id up to which a reader may read without passing one yet to commit
        (``None``: all of them)."""
        ...

    def probe(self, conn: LogConnection, run_id: str | None) -> None:
        """Read what the engine is about to touch for ``run_id``; damage raises."""
        ...

    def check(self, conn: LogConnection) -> tuple[int, list[str]]:
        """(schema version, problems) of the whole log (``steplog check``)."""
        ...

    # -- on an error ---------------------------------------------------------------------------

    def is_transient(self, exc: BaseException) -> bool:
        """Is the log only away for now (the same work may succeed later, on a new connection)?"""
        ...

    def server_failure(self, exc: BaseException, where: object) -> str | None:
        """One line for a database server's failure, or ``None``."""
        ...


def backend_for(location: LogLocation) -> Backend:
    """The backend of the log at ``location``: a ``PgUrl`` is PostgreSQL's (imported only then:
    the SQLite path's start-up cost stays as it was), anything else a SQLite file."""
    if isinstance(location, PgUrl):
        from steplog.log.pg import POSTGRES

        return POSTGRES
    return SQLITE


def backend_of(thing: object) -> Backend:
    """The backend of the log a connection is to, or an error came from: a PostgreSQL log's
    connections and errors carry theirs (``backend``); ``sqlite3``'s carry none."""
    return cast(Backend, getattr(thing, "backend", None) or SQLITE)
