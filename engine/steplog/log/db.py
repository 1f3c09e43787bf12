"""Opening the log, whichever database it is on: the functions every other module calls.

A log is a SQLite file or, for a ``postgresql://`` location, a PostgreSQL database. Each function
here takes either (``location.LogLocation``) and asks the log's backend (``backend.backend_for``):
``sqlite`` opens, checks and migrates a file (every PRAGMA in one place, private file modes),
``pg`` a database. A log is *checked read-only before anything writes to it*: a foreign, corrupt
or newer one is refused with a ``LogError`` and left exactly as it was.

What a connection is and how its transactions begin and end is ``connection``'s; its names are
re-exported here, where the rest of the engine has always found them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, overload

from steplog.errors import LogUnavailable
from steplog.log.backend import backend_for, backend_of
from steplog.log.connection import (
    RUN_WRITE,
    RUN_WRITE_BATCHED,
    C,
    LogConnection,
    LogCursor,
    LogFailure,
    LogOperationFailed,
    LogRow,
    Synchronous,
    immediate,
    named_rows,
    rollback,
    rolled_back_on_error,
    run_write,
    set_synchronous,
)
from steplog.log.location import LogLocation, PgUrl, private_dir, resolve
from steplog.log.sqlite import (
    BUSY_TIMEOUT_MS,
    PAGE_SIZE,
    SQLITE_HEADER,
    connect_readonly,
    expected_tables,
    is_damage,
    is_read_only,
    pending_migrations,
    read_only_log,
)

if TYPE_CHECKING:
    import sqlite3

    from steplog.log.pg import PgConnection


def default_db_path() -> LogLocation:
    """``$STEPLOG_DB``, else ``steplog.db`` in the user data directory (created 0700)."""
    return resolve(None)


def location(db: str | os.PathLike[str] | None) -> LogLocation:
    """``--db`` as given (a path or a ``postgresql://`` URL), else the default."""
    return resolve(db)


def load_driver(location: LogLocation) -> None:
    """Import what opening this log takes, before the engine takes over the stop signals: a
    stop landing inside an import is raised where nobody can handle it (an import lock's
    callback). SQLite's module is loaded already; psycopg only for a PostgreSQL log."""
    backend_for(location).load_driver()


def inspect(path: LogLocation) -> int:
    """Check an existing log read-only and return its schema version (0 = empty, new).

    Raises ``CorruptDatabase``, ``ForeignDatabase`` or ``NewerSchema``; never writes.
    """
    return backend_for(path).inspect(path)


@overload
def open_log(path: Path, *, synchronous: Synchronous = "FULL") -> sqlite3.Connection: ...
@overload
def open_log(path: PgUrl, *, synchronous: Synchronous = "FULL") -> PgConnection: ...
@overload
def open_log(path: LogLocation, *, synchronous: Synchronous = "FULL") -> LogConnection: ...
def open_log(path: LogLocation, *, synchronous: Synchronous = "FULL") -> LogConnection:
    """Open (creating if needed) a log for writing: validated, migrated, private."""
    return backend_for(path).open_log(path, synchronous=synchronous)


@overload
def open_readonly(path: Path, *, one_shot: bool = False) -> sqlite3.Connection: ...
@overload
def open_readonly(path: PgUrl, *, one_shot: bool = False) -> PgConnection: ...
@overload
def open_readonly(path: LogLocation, *, one_shot: bool = False) -> LogConnection: ...
def open_readonly(path: LogLocation, *, one_shot: bool = False) -> LogConnection:
    """Open an existing log for reading only; refuses missing, foreign and corrupt ones.

    ``one_shot``: for a reader that closes the connection within one command (no -wal or -shm
    left beside an idle log file: ``sqlite.connect_readonly``)."""
    return backend_for(path).open_readonly(path, one_shot=one_shot)


def connect_plain(location: LogLocation) -> LogConnection:
    """A second connection to a log already opened and checked (the lease heartbeat's): no
    validation, no migration, at ``synchronous = NORMAL`` (a lost renewal only shortens the
    lease)."""
    return backend_for(location).connect_plain(location)


def open_follower(location: LogLocation) -> LogConnection | None:
    """A read-only connection to a log an engine is about to create (the kill test's watch), or
    ``None`` while there is none yet: no file, or a database without the log's schema."""
    return backend_for(location).open_follower(location)


def has_column(conn: LogConnection, table: str, column: str) -> bool:
    """Does the log's ``table`` have ``column`` (a schema-1 file read without migrating it has
    not)?"""
    return backend_of(conn).has_column(conn, table, column)


def announce_claimable(conn: LogConnection, run_id: str) -> None:
    """In a write transaction that makes ``run_id`` claimable: wake the workers waiting for one
    when it commits (PostgreSQL's ``NOTIFY``; on SQLite they poll)."""
    backend_of(conn).announce_claimable(conn, run_id)


def for_update(conn: object, *, skip_locked: bool = False) -> str:
    """The row-locking clause for a ``SELECT`` in a write transaction: none on SQLite, where the
    write lock covers the database; ``FOR UPDATE`` on PostgreSQL (``SKIP LOCKED``: rows another
    transaction holds are left out instead of waited for)."""
    return backend_of(conn).for_update(skip_locked=skip_locked)


@contextmanager
def run_locked(conn: C, run_id: str) -> Iterator[C]:
    """A write transaction that decides on one run as a whole, which may not exist yet: an
    engine's claim (create, resume, take over), ``submit``, run control (cancel, signal, retry;
    a fork, on its new run). On SQLite ``immediate``: the write lock covers the file.

    On PostgreSQL a ``run_write`` that first takes the run's own lock (``pg.lock_run``), which
    every such transaction of that run takes: two of them on one run take turns, on two runs they
    go side by side. The block still locks the run row (``for_update``) before it reads what it
    decides on, against the writers that take no run lock: the run's engine (its fence) and
    workers claiming it (``SKIP LOCKED``). Run lock, then row: never the other way round."""
    with run_write(conn):
        backend_of(conn).lock_run(conn, run_id)
        yield conn


def is_transient(exc: BaseException) -> bool:
    """Is the log only away for now, so that the same work may succeed later on a new connection?

    Yes for ``LogUnavailable``; on PostgreSQL for a lost, closed or refused connection, a server
    shutting down, restarting or short of connections, a deadlock or timeout (``pg.transient``);
    on SQLite for a file still locked past the busy timeout, an I/O error or a full disk. No for
    a damaged, foreign, newer or read-only log, or a statement the log refuses: those stay wrong
    however long one waits."""
    return isinstance(exc, LogUnavailable) or backend_of(exc).is_transient(exc)


def hand_over(location: LogLocation) -> tuple[list[str], dict[str, str]]:
    """How a child process is told where the log is: ``--db`` on its command line, or (a URL
    that may carry a password) ``STEPLOG_DB`` in its environment, which only its user can read."""
    return backend_for(location).hand_over(location)


def log_file(location: LogLocation) -> Path | None:
    """The file the log is, or ``None`` for a log in a database server (what only a file allows,
    ``steplog prune`` and ``import``, asks this)."""
    return backend_for(location).file_of(location)


def is_server(location: LogLocation) -> bool:
    """Is the log in a database server many hosts may share, rather than a file here?"""
    return backend_for(location).is_server


__all__ = [
    "BUSY_TIMEOUT_MS",
    "PAGE_SIZE",
    "RUN_WRITE",
    "RUN_WRITE_BATCHED",
    "SQLITE_HEADER",
    "C",
    "LogConnection",
    "LogCursor",
    "LogFailure",
    "LogOperationFailed",
    "LogRow",
    "Synchronous",
    "announce_claimable",
    "connect_plain",
    "connect_readonly",
    "default_db_path",
    "expected_tables",
    "for_update",
    "hand_over",
    "has_column",
    "immediate",
    "inspect",
    "is_damage",
    "is_read_only",
    "is_server",
    "is_transient",
    "load_driver",
    "location",
    "log_file",
    "named_rows",
    "open_follower",
    "open_log",
    "open_readonly",
    "pending_migrations",
    "private_dir",
    "read_only_log",
    "rollback",
    "rolled_back_on_error",
    "run_locked",
    "run_write",
    "set_synchronous",
]
