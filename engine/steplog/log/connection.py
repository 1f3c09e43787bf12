"""A connection to the log, whichever database it is on, and how its transactions begin and end.

The engine writes SQL once, SQLite-flavoured (``?`` placeholders, ``BEGIN IMMEDIATE``, ``INSERT OR
IGNORE``), against ``LogConnection``: the ``sqlite3`` subset it uses. A SQLite log's connection is
a ``sqlite3.Connection``; a PostgreSQL log's speaks the same subset (``pg.PgConnection``), and its
errors are subclasses of ``sqlite3``'s. So the names below hold for both, and what differs
between the two is asked of the log's backend (``steplog.log.backend``), never tested for.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol, TypeVar

from steplog.log import interrupts


class LogCursor(Protocol):
    """What the engine reads from a statement (``sqlite3.Cursor`` and psycopg's cursor)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Any: ...


class LogConnection(Protocol):
    """The sqlite3 subset the engine uses on a log: ``sqlite3.Connection``
    (``isolation_level=None``,
    transactions by SQL) or ``pg.PgConnection``. Rows index by position (and by column name
    inside ``named_rows``)."""

    row_factory: Any

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...
    @property
    def in_transaction(self) -> bool: ...
    def close(self) -> None: ...


C = TypeVar("C", bound=LogConnection)


class LogRow(Protocol):
    """A row read from the log: by position and by column name (``sqlite3.Row``, ``pg``'s rows)."""

    def __getitem__(self, key: int | str, /) -> Any: ...
    def keys(self) -> list[str]: ...


LogFailure = sqlite3.Error
"""What the database under a log raises (a PostgreSQL log's errors are subclasses, ``pg.PgError``):
a failed write, a lost server, a damaged page. ``db.is_transient`` tells the passing ones apart."""

LogOperationFailed = sqlite3.OperationalError
"""A ``LogFailure`` of the moment (locked, busy, connection lost, disk full) rather than of the
data."""

Synchronous = Literal["FULL", "NORMAL"]
"""How durable a connection's commits are: ``FULL`` survives power loss (the default), ``NORMAL``
survives a kill (``sqlite.apply_pragmas`` says why; PostgreSQL: ``synchronous_commit``)."""


@contextmanager
def named_rows(conn: C) -> Iterator[C]:
    """Rows read inside the block index by column name too (``LogRow``); the connection's plain
    tuples come back after it (the engine's hot path reads by position). A PostgreSQL log's rows
    always have names."""
    prior = conn.row_factory
    conn.row_factory = sqlite3.Row
    try:
        yield conn
    finally:
        conn.row_factory = prior


def set_synchronous(conn: LogConnection, level: Synchronous) -> None:
    """How durable the connection's next commits are (``Synchronous``)."""
    conn.execute(f"PRAGMA synchronous = {level}")


RUN_WRITE = "BEGIN IMMEDIATE -- run_write"
"""How a write transaction of one run's rows begins (``run_write``). SQLite reads it as
``BEGIN IMMEDIATE`` (the comment is a comment); PostgreSQL takes no database-wide lock for it
(``steplog.log.pg``): the transaction must lock the run row before it reads anything it decides on,
with the fence ``UPDATE`` or ``db.for_update``."""

RUN_WRITE_BATCHED = "BEGIN IMMEDIATE -- run_write, batched"
"""A ``RUN_WRITE`` whose statements need not wait for each other (the engine's fenced writes,
``journal``). SQLite reads it as ``BEGIN IMMEDIATE``. On PostgreSQL its statements are queued and
sent together when a result is first read and at the ``COMMIT`` (``pg.PgConnection``): a step's
``BEGIN``, marker and fence travel in one round trip, its inserts and the ``COMMIT`` in another
(two round trips, not five). The price: an error of one statement may be raised by a later read
or by the ``COMMIT``; so only for transactions that roll back whole on any error."""


@contextmanager
def immediate(conn: C) -> Iterator[C]:
    """A write transaction that takes the write lock up front.

    A deferred transaction that reads and then writes fails with SQLITE_BUSY *without waiting*
    when another writer got in between; ``BEGIN IMMEDIATE`` waits on ``busy_timeout`` instead.
    On PostgreSQL it is a database-wide advisory lock (``pg``), for what is not one run's: a
    migration. A transaction of one run is ``run_write`` or ``db.run_locked``.
    """
    with interrupts.critical(), rolled_back_on_error(conn):
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")


@contextmanager
def run_write(conn: C) -> Iterator[C]:
    """A write transaction of one run's rows: ``immediate`` on SQLite; on PostgreSQL, writers of
    different runs commit side by side. The block locks the run row first (``db.for_update``)."""
    with interrupts.critical(), rolled_back_on_error(conn):
        conn.execute(RUN_WRITE)
        yield conn
        conn.execute("COMMIT")


@contextmanager
def rolled_back_on_error(conn: LogConnection) -> Iterator[None]:
    """Roll back the open transaction if the block raises, and let the block's error through.

    Only if one is open: a failed ``BEGIN``, or an error after ``COMMIT`` succeeded, leaves none,
    and ``ROLLBACK`` then fails with an error that would replace the real one.
    """
    try:
        yield
    except BaseException:
        rollback(conn)
        raise


def rollback(conn: LogConnection) -> None:
    """Roll back the open transaction, if one is open (see ``rolled_back_on_error``)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite rolled back already (an I/O error aborts the transaction)
