"""The one reader of the event log: its row type, and reads since a bookmark.

The log is written by ``journal`` (steps, effects, decisions) and ``claim`` (runs, leases, the
terminal record), each event in the same transaction as the rows it describes. Everything that
*reads* events does it here: the monitor's tailer (``steplog.log.reader``), the verdict, the
kill test's watch and ``History``. So an event's shape (its columns, its JSON payload parsed to a
dict, its kind an ``EventKind`` string) is defined once, and a reader is a consumer with a
bookmark: the id of the last event it has seen. Ids only grow (``AUTOINCREMENT``), so "what is
new" is ``id > bookmark``, whatever else the log holds.

Reads use plain SQL with ``?`` placeholders on any connection the engine opens (a SQLite file,
or PostgreSQL through ``steplog.log.pg``). On SQLite an id is taken under the write lock, so ids
commit in order. On PostgreSQL writers of different runs commit side by side, and a lower id can
commit after a higher one: every read there stops at ``settled_upto`` (``pg.event_horizon``), so
a bookmark never passes an event that is yet to commit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from steplog.log.backend import backend_of

EVENT_COLUMNS = "id, run_id, ts, incarnation, kind, seq, data"
"""The columns of an ``Event``, in its field order, for readers that write their own ``WHERE``."""


class Event(NamedTuple):
    """One row of the append-only ``event`` table, with ``data`` parsed.

    A ``NamedTuple`` rather than a frozen dataclass: opening a 100k-step run in the monitor builds
    200k of these, and a frozen dataclass's ``__init__`` cost 2.6x as much (measured).
    """

    id: int
    run_id: str
    ts: float
    incarnation: int
    kind: str
    """An ``EventKind`` value (a ``StrEnum`` member compares equal to its text)."""
    seq: int | None
    """The step it concerns; ``None`` for run-level events."""
    data: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> Event:
        """From a row of ``SELECT {EVENT_COLUMNS}`` (a tuple or a ``sqlite3.Row``)."""
        return cls(row[0], row[1], row[2], row[3], row[4], row[5], payload(row[6]))


def payload(text: str | None) -> dict[str, Any]:
    """An event's ``data`` as a dict: ``{}`` for none; never raises on a hand-edited row."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}


class Connection(Protocol):
    """What a reader needs of a connection (``sqlite3.Connection`` and ``steplog.log.pg``'s
    both)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...


def settled_upto(conn: Connection) -> int | None:
    """The id up to which the log can be read without passing an event yet to commit: ``None``
    (all of it) on SQLite; ``pg.event_horizon`` on PostgreSQL."""
    return backend_of(conn).settled_upto(conn)  # type: ignore[arg-type]


def events_since(
    conn: Connection, since: int = 0, *, run_id: str | None = None, limit: int | None = None
) -> list[Event]:
    """Events with ``id > since``, oldest first; of one run if ``run_id``; at most ``limit``;
    none beyond ``settled_upto``."""
    sql = f"SELECT {EVENT_COLUMNS} FROM event WHERE id > ?"
    args: list[Any] = [since]
    upto = settled_upto(conn)
    if upto is not None:
        sql += " AND id <= ?"
        args.append(upto)
    if run_id is not None:
        sql += " AND run_id = ?"
        args.append(run_id)
    sql += " ORDER BY id"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(limit)
    return [Event.from_row(r) for r in conn.execute(sql, tuple(args)).fetchall()]


def iter_events(conn: Connection, run_id: str) -> Iterator[Event]:
    """The run's events, oldest first, none beyond ``settled_upto``, one at a time from the
    cursor (a reader that folds them as they pass holds no list of a million of them)."""
    sql = f"SELECT {EVENT_COLUMNS} FROM event WHERE run_id = ?"
    args: list[Any] = [run_id]
    upto = settled_upto(conn)
    if upto is not None:
        sql += " AND id <= ?"
        args.append(upto)
    for row in conn.execute(sql + " ORDER BY id", tuple(args)):
        yield Event.from_row(row)


def events_of_kind(conn: Connection, kind: str, run_ids: Sequence[str]) -> list[Event]:
    """The events of ``kind`` of these runs, oldest first, none beyond ``settled_upto``."""
    if not run_ids:
        return []
    sql = (
        f"SELECT {EVENT_COLUMNS} FROM event WHERE kind = ? AND run_id IN "
        f"({', '.join('?' for _ in run_ids)})"
    )
    args: list[Any] = [kind, *run_ids]
    upto = settled_upto(conn)
    if upto is not None:
        sql += " AND id <= ?"
        args.append(upto)
    return [Event.from_row(r) for r in conn.execute(sql + " ORDER BY id", tuple(args)).fetchall()]


class EventTail:
    """A consumer of the log: ``read`` returns what is new since the last read, and moves on."""

    def __init__(self, *, since: int = 0, run_id: str | None = None) -> None:
        self.bookmark = since
        """The id of the last event read (0: none yet)."""
        self.run_id = run_id

    def read(self, conn: Connection, *, limit: int | None = None) -> list[Event]:
        events = events_since(conn, self.bookmark, run_id=self.run_id, limit=limit)
        if events:
            self.bookmark = events[-1].id
        return events
