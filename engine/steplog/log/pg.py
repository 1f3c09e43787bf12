"""The log on PostgreSQL (psycopg 3): a connection that speaks the engine's sqlite3 subset.

The engine writes SQL once, SQLite-flavoured (``?`` placeholders, ``BEGIN IMMEDIATE``, ``INSERT OR
IGNORE``, ``PRAGMA synchronous``), against ``db.LogConnection``. ``PgConnection`` offers exactly
that subset on PostgreSQL, so nothing above the log package knows which database it writes:

- ``execute(sql, params)`` -> a cursor with ``fetchone``/``fetchall``/``rowcount``/iteration;
  rows are tuples that are also indexable by column name (like ``sqlite3.Row``).
- ``?`` -> ``%s``; ``INSERT OR IGNORE INTO`` -> ``INSERT INTO ... ON CONFLICT DO NOTHING``.
- Write transactions do not take turns as on SQLite; they commit side by side (PostgreSQL's
  group commit), and each is serialised only where it must be. No lock of a run's writes is
  wider than that run:

  - ``db.RUN_WRITE`` (an engine's fenced step writes, a worker's claim, its hand-back): one run's
    rows, locked row by row. The fence (``UPDATE run ... WHERE id = ? AND incarnation = ?``) or
    ``SELECT ... FOR UPDATE [SKIP LOCKED]`` locks the run row first, so a takeover and the engine
    it fences wait for each other, and workers claiming at once skip each other's rows.
  - ``db.run_locked`` (an engine's claim of its run, ``steplog submit``, run control: cancel,
    signal, retry, fork): a ``RUN_WRITE`` that first takes the run's own lock (``lock_run``:
    ``pg_advisory_xact_lock(RUN_NS, hashtext(run id))``), then its row. A row cannot be locked
    before it exists; the run's lock can, so two engines creating one run id, or a fork and a
    claim of the new id, take turns instead of one failing on the primary key. Two ids whose
    hashes collide (one pair in 2**32) only take turns needlessly.
  - ``BEGIN IMMEDIATE`` untagged (migrations: the schema is the whole database's, so they stay
    database-wide): also ``pg_advisory_xact_lock(LOCK_KEY)``, one key per database, as SQLite's
    write lock. Nothing else on PostgreSQL begins so: ``prune`` and ``import`` lock the runs they
    remove or add, each as ``db.run_locked`` does, in one order.

  Ids then no longer come in commit order: transaction A can take event id 7, B id 8, and B
  commit first. A reader tailing "events since id N" must not read 8 and move its bookmark past 7.
  So every write transaction first takes a *marker*: a shared advisory lock on (``ORDER_NS``,
  the event sequence's last value), which it holds to its end; every id it takes is above its
  marker. ``event_horizon`` reads the sequence, then the lowest marker held: ids up to the lower
  of the two are settled (committed or gone for good). ``logread`` reads only those. Readers
  never block writers.
- ``PRAGMA synchronous = NORMAL`` -> the next transaction runs with ``synchronous_commit = off``
  (a kill cannot lose it; a server crash may lose the last ones), ``FULL`` -> ``on``. Other PRAGMAs
  are SQLite's own and refused here.
- a NUL character in a text parameter is stored as U+FFFD (``NUL_STAND_IN``): PostgreSQL's text
  cannot hold it.
- psycopg errors are re-raised as subclasses of the matching ``sqlite3`` errors, so the engine's
  ``except sqlite3.Error`` (a failed write is a ``LogWriteError``, and so on) holds on both.

psycopg is imported only when a ``postgresql://`` log is opened: the SQLite path's start-up
cost stays where it was.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import ForeignDatabase, LogError, LogUnavailable
from steplog.log.connection import LogConnection, Synchronous, set_synchronous
from steplog.log.jsonsql import JsonSql, PgJsonSql
from steplog.log.pgschema import PG_ONLY, QUEUE_CHANNEL, migrate, read_state, read_version
from steplog.log.pgschema import check as check_schema
from steplog.log.pgschema import tables as tables
from steplog.log.pgspace import PG_SPACE
from steplog.log.schema import SCHEMA_VERSION
from steplog.log.space import Space

NUL_STAND_IN = "\ufffd"
"""What a NUL character in a text value is stored as: PostgreSQL's ``text`` cannot hold one
(SQLite's can). An exception message with a NUL in it is then still recorded, not a failed write."""

RUN_WRITE_TAG = "run_write"
BATCHED_TAG = "batched"
"""In a ``RUN_WRITE`` (``db.RUN_WRITE_BATCHED``): its statements are sent in batches."""
"""In a ``BEGIN IMMEDIATE`` (``db.RUN_WRITE``): a write of one run's rows, locked row by row."""

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Engine


LOCK_KEY = 0x53544C47  # "STLG", as the SQLite file's application_id
"""The database-wide lock: migrations only (the module docstring)."""
RUN_NS = 0x53544C52  # "STLR"
"""The runs' locks' namespace: a run's lock is the two-key advisory lock (``RUN_NS``, hash of its
id), which PostgreSQL keeps apart from the one-key locks (``LOCK_KEY``, the markers)."""
ORDER_NS = 0x53544C
"""The markers' namespace: a marker is the advisory lock ``ORDER_NS << 40 | id`` (ids below
2**40)."""

_LAST_ID = "coalesce(pg_sequence_last_value(to_regclass('event_id_seq')), 0)"
_MARKER = f"pg_advisory_xact_lock_shared((CAST({ORDER_NS} AS bigint) << 40) | {_LAST_ID})"
_LOWEST_MARKER = (
    "SELECT min(((classid::bigint & 255) << 32) | objid::bigint) FROM pg_locks WHERE locktype = "
    "'advisory'"
    f" AND objsubid = 1 AND (classid::bigint >> 8) = {ORDER_NS}"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
CONNECT_TIMEOUT = 10


class PgError(sqlite3.DatabaseError):
    """A PostgreSQL error, as a ``sqlite3.DatabaseError`` (``sqlstate`` says which)."""

    sqlstate: str | None = None

    @property
    def backend(self) -> PostgresBackend:
        """Whose error this is (``backend.backend_of``): a PostgreSQL log's."""
        return POSTGRES


class PgOperationalError(PgError, sqlite3.OperationalError):
    """Connection lost, server shutting down, lock or statement timeout, disk full."""


class PgIntegrityError(PgError, sqlite3.IntegrityError):
    """A constraint or the append-only trigger refused the write."""


_AS_SQLITE_DOES = ("42P01", "42703")
"""Undefined table or column: SQLite's "no such table/column" is an ``OperationalError``."""


_TRANSIENT_STATES = ("08", "40", "53", "55P03", "57", "58")
"""SQLSTATEs after which the same work may succeed later, on a new connection: a connection
exception, a rolled-back transaction (deadlock, serialization), insufficient resources (too
many connections, a full disk), a lock not available, operator intervention (a shutdown or
restart, the server starting up, a statement timeout) and a system (I/O) error."""


def transient(exc: BaseException) -> bool:
    """Is this PostgreSQL error the server being away for now (``db.is_transient`` asks)? An
    operational error without a SQLSTATE is the connection's own: lost, closed or refused."""
    if not isinstance(exc, PgOperationalError):
        return False
    if exc.sqlstate is None:
        return True
    # 57P04: the database was dropped, which no wait cures.
    return exc.sqlstate.startswith(_TRANSIENT_STATES) and exc.sqlstate != "57P04"


_REFUSED = ("does not exist", "authentication failed", "no pg_hba.conf entry")
"""What a server that is up says when it refuses a connection for good: no such database or
role, wrong password, not allowed from here. libpq gives a failed connection no SQLSTATE, only
the server's words; said in another language they are not recognised, and the refusal is taken
for the server being away."""


def _wrap(exc: Exception) -> PgError:
    import psycopg

    cls: type[PgError] = PgError
    state = getattr(exc, "sqlstate", None) or ""
    if isinstance(exc, psycopg.IntegrityError) or state.startswith("23"):
        cls = PgIntegrityError
    elif (
        isinstance(exc, psycopg.OperationalError)
        or state.startswith(("53", "57", "08"))
        or state in _AS_SQLITE_DOES
    ):
        cls = PgOperationalError
    err = cls(str(exc).strip())
    err.sqlstate = state or None
    return err


# -- rows ---------------------------------------------------------------------------------------


class _Row(tuple[Any, ...]):
    """A result row: a tuple, also indexable by column name (``sqlite3.Row``'s two ways)."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@lru_cache(maxsize=256)
def _row_class(names: tuple[str, ...]) -> type[_Row]:
    return type("Row", (_Row,), {"__slots__": (), "_index": {n: i for i, n in enumerate(names)}})


def _row_factory(cursor: Any) -> Callable[[Sequence[Any]], Any]:
    desc = cursor.description
    if desc is None:
        return tuple
    return _row_class(tuple(d.name for d in desc))


# -- SQL ----------------------------------------------------------------------------------------

_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.I)


@lru_cache(maxsize=1024)
def translate(sql: str, with_params: bool) -> str:
    """SQLite-flavoured SQL as PostgreSQL SQL: placeholders (outside string literals) and
    ``INSERT OR IGNORE``. ``%`` is doubled where psycopg would read it as a placeholder."""
    ignore = bool(_OR_IGNORE.match(sql))
    if ignore:
        sql = _OR_IGNORE.sub("INSERT INTO", sql, count=1)
    if with_params:
        out: list[str] = []
        quoted = False
        for ch in sql:
            if ch == "'":
                quoted = not quoted
            if ch == "%":
                out.append("%%")
            elif ch == "?" and not quoted:
                out.append("%s")
            else:
                out.append(ch)
        sql = "".join(out)
    if ignore:
        returning = re.search(r"\sRETURNING\s", sql, re.I)
        at = returning.start() if returning else len(sql.rstrip().rstrip(";"))
        sql = sql[:at] + " ON CONFLICT DO NOTHING" + sql[at:]
    return sql


@lru_cache(maxsize=256)
def _pieces(sql: str) -> tuple[str, ...]:
    """``translate(sql)`` split at its placeholders (``?`` outside string literals)."""
    out: list[str] = []
    piece: list[str] = []
    quoted = False
    for ch in translate(sql, False):
        if ch == "'":
            quoted = not quoted
        if ch == "?" and not quoted:
            out.append("".join(piece))
            piece = []
        else:
            piece.append(ch)
    out.append("".join(piece))
    return tuple(out)


def _literal(value: Any) -> str | None:
    """``value`` as an SQL literal, for the types the engine's writes carry (``None``: another
    type). Strings as standard-conforming literals (``standard_conforming_strings``, on since
    PostgreSQL 9.1 and checked at connect): only ``'`` is doubled; a NUL, which text cannot hold,
    is stored as ``NUL_STAND_IN`` as in ``execute``."""
    t = type(value)
    if t is str or isinstance(value, str):  # and a str enum (``EventKind``): its text
        text = str.replace(value, "\x00", NUL_STAND_IN) if "\x00" in value else value
        return "'" + str.replace(text, "'", "''") + "'"
    if t is int:
        return str(value) if value >= 0 else f"({value})"
    if t is float:
        if not math.isfinite(value):
            return "'NaN'::float8" if value != value else f"'{value:+}inity'::float8"
        return repr(value) if value >= 0 else f"({value!r})"
    if value is None:
        return "NULL"
    return None


def literals(params: Sequence[Any]) -> list[str] | None:
    """``params`` as SQL literals (``_literal``), or ``None`` if one cannot be written so."""
    out = []
    for value in params:
        lit = _literal(value)
        if lit is None:
            return None
        out.append(lit)
    return out


@lru_cache(maxsize=256)
def numbered(sql: str) -> str:
    """SQLite-flavoured ``sql`` with ``$1``, ``$2``... for its placeholders: a ``PREPARE``'s."""
    pieces = _pieces(sql)
    return pieces[0] + "".join(f"${i}{p}" for i, p in enumerate(pieces[1:], 1))


def bind(sql: str, params: Sequence[Any]) -> str | None:
    """SQLite-flavoured ``sql`` with ``params`` bound into it, as PostgreSQL SQL to send as a
    simple query (a batch, ``PgConnection``); ``None`` if a value is of a type ``_literal`` does
    not write."""
    pieces = _pieces(sql)
    if len(pieces) != len(params) + 1:
        raise PgError(f"{len(params)} values for {len(pieces) - 1} placeholders in {sql!r}")
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:], strict=True):
        lit = _literal(value)
        if lit is None:
            return None
        out.append(lit)
        out.append(piece)
    return "".join(out)


class _NoRows:
    rowcount = -1
    description = None

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Any:
        return iter(())


_NO_ROWS = _NoRows()


PREPARE_AFTER = 3
"""A batched statement is prepared on the server the third time it is queued (the engine's
per-step statements at its first steps; a rare one never)."""


class _Queued:
    """A statement of a batched transaction (``PgConnection``), then its result: the first read
    of its rows or ``rowcount`` sends it, with every statement queued before it, in one round
    trip. Only the result of the last statement sent is kept: read a result before queuing the
    next statement (reading one later is refused, never answered wrongly)."""

    __slots__ = ("_conn", "_rows", "_rowcount", "_state")

    QUEUED, DONE, PASSED = 0, 1, 2
    """Not sent yet; sent, its result here; sent, its result not kept (a later one's is)."""

    def __init__(self, conn: PgConnection) -> None:
        self._conn = conn
        self._rows: list[Any] = []
        self._rowcount = -1
        self._state = self.QUEUED

    def _done(self) -> None:
        if self._state == self.QUEUED:
            self._conn._send_batch()
        if self._state == self.PASSED:
            raise PgError(
                "a batched statement's result was read after a later statement was sent; read "
                "it before queuing the next one"
            )

    def _got(self, rows: list[Any], rowcount: int) -> None:
        self._rows, self._rowcount, self._state = rows, rowcount, self.DONE

    def _passed(self) -> None:
        self._state = self.PASSED

    @property
    def rowcount(self) -> int:
        self._done()
        return self._rowcount

    def fetchone(self) -> Any:
        self._done()
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[Any]:
        self._done()
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Any:
        return iter(self.fetchall())


class PgConnection:
    """One psycopg connection, autocommit, with transactions begun and ended by SQL as the
    engine's SQLite connections are (``isolation_level=None``)."""

    def __init__(self, raw: psycopg.Connection[Any], url: str) -> None:
        self._raw = raw
        self.url = url
        self.row_factory: Any = None  # accepted for sqlite3 compatibility: rows always have names
        self._sync_off = False
        self._batch: list[str] | None = None
        """The statements of an open ``RUN_WRITE_BATCHED`` transaction not sent yet."""
        self._queued: list[_Queued | None] = []
        """Their cursors, one per statement (``None``: nobody reads its result)."""
        self._client: psycopg.ClientCursor[Any] | None = None
        """psycopg's client-side binding, for a value ``bind`` does not write."""
        self._standard = raw.info.parameter_status("standard_conforming_strings") == "on"
        self._encoding = raw.info.encoding
        self._prepared: dict[str, str] = {}
        """Batched statements (SQLite-flavoured SQL) prepared on this connection, by name."""
        self._preparing: list[tuple[str, str]] = []
        """Those whose ``PREPARE`` is in the batch not sent yet."""
        self._names = 0
        self._seen: dict[str, int] = {}
        """How often each batched statement not prepared yet was queued."""
        self._loader: Any = None
        """psycopg's loader of a batch's result rows (``_rows_of``), made once."""
        self.round_trips = 0
        """Requests sent and waited for, each one round trip to the server (for measurements)."""
        """Backslashes in string literals are plain characters (``bind`` relies on it)."""

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        head = sql.lstrip()[:8].upper()
        if self._batch is not None:
            if head.startswith(("COMMIT", "ROLLBACK")):
                return self._end_batch(head.startswith("COMMIT"))
        elif head.startswith("BEGIN"):
            if BATCHED_TAG in sql:
                return self._begin_batch()
            sql, parameters = self._begin(sql), ()
        if head.startswith("PRAGMA"):
            return self._pragma(sql)
        params = tuple(parameters) if parameters else None
        try:
            if self._batch is not None:
                return self._queue(sql, params)
            self.round_trips += 1
            return self._raw.execute(translate(sql, params is not None), params)
        except Exception as exc:
            import psycopg

            if isinstance(exc, psycopg.DataError) and params and "NUL (0x00)" in str(exc):
                # Refused before anything was sent (adapting the parameters), so try once more.
                return self.execute(
                    sql,
                    tuple(
                        p.replace("\x00", NUL_STAND_IN) if isinstance(p, str) else p for p in params
                    ),
                )
            if isinstance(exc, psycopg.Error):
                raise _wrap(exc) from exc
            raise

    def _begin(self, sql: str) -> str:
        """One round trip that opens the transaction with its locks (see the module docstring)."""
        local = "SET LOCAL synchronous_commit = off; " if self._sync_off else ""
        if "IMMEDIATE" not in sql.upper():
            # A read transaction (an export): one snapshot for all its statements, as in SQLite.
            return f"BEGIN ISOLATION LEVEL REPEATABLE READ; {local}".rstrip("; ")
        if RUN_WRITE_TAG in sql:
            return f"BEGIN; {local}SELECT {_MARKER}"
        return f"BEGIN; {local}SELECT {_MARKER}, pg_advisory_xact_lock({LOCK_KEY})"

    def _begin_batch(self) -> Any:
        """``RUN_WRITE_BATCHED``: the transaction's statements are queued, bound here (client
        side), and sent together, as one simple query, when a result is first read (the fence's:
        ``BEGIN``, the marker and the fence in one round trip) and at the ``COMMIT`` (the rest and
        the ``COMMIT`` in another). PostgreSQL runs a simple query's statements in order and
        stops at the first error, which leaves the transaction aborted; it is not prepared, so
        the server parses each statement: cheaper here than a round trip each."""
        self._batch = ["BEGIN"]
        self._queued = [None]
        if self._sync_off:
            self._batch.append("SET LOCAL synchronous_commit = off")
            self._queued.append(None)
        self._batch.append(f"SELECT {_MARKER}")
        self._queued.append(None)
        return _NO_ROWS

    def _queue(self, sql: str, params: tuple[Any, ...] | None) -> _Queued:
        assert self._batch is not None
        if not params:
            text: str | None = translate(sql, False)
        elif not self._standard:
            text = None
        else:
            name = self._prepared.get(sql) or self._prepare(sql, len(params))
            if name is None:
                text = bind(sql, params)
            else:
                lits = literals(params)
                text = None if lits is None else f"EXECUTE {name}({', '.join(lits)})"
        if text is None:  # a value of another type: psycopg's own quoting
            if self._client is None:
                import psycopg

                self._client = psycopg.ClientCursor(self._raw)
            text = self._client.mogrify(translate(sql, True), params)
        self._batch.append(text)
        q = _Queued(self)
        self._queued.append(q)
        return q

    def _prepare(self, sql: str, n: int) -> str | None:
        """A name to ``EXECUTE`` ``sql`` by, once it is seen ``PREPARE_AFTER`` times in batches:
        its ``PREPARE`` is queued first (the server then parses and plans it once per
        connection, as psycopg does for its statements). Recorded as prepared once its batch
        went through; one whose batch failed is not prepared again on this connection (a
        ``PREPARE`` that cannot infer a parameter's type must not fail every write of it)."""
        seen = self._seen.get(sql, 0) + 1
        if seen < PREPARE_AFTER:
            if len(self._seen) >= 512:  # SQL made on the fly: count afresh
                self._seen.clear()
            self._seen[sql] = seen
            return None
        assert self._batch is not None
        self._names += 1  # never a name used before: a failed batch's PREPARE may have run
        name = f"steplog_{self._names}"
        self._batch.append(f"PREPARE {name} AS {numbered(sql)}")
        self._queued.append(None)
        self._preparing.append((sql, name))
        self._seen[sql] = -(2**62)  # prepared (or failed): never counted again
        return name

    def _send_batch(self) -> None:
        """Send the queued statements in one round trip, as one simple query straight through
        libpq (``PQexec``: a few µs of client time where a psycopg ``execute`` and its results
        take ~100), and give the last one its result. An error is raised here; the transaction
        is then aborted, for the caller to roll back."""
        import psycopg
        from psycopg.errors import error_from_result
        from psycopg.pq import ExecStatus

        batch, queued = self._batch, self._queued
        if not batch:
            return
        self._batch, self._queued = [], []
        try:
            text = ";\n".join(batch).encode(self._encoding)
        except UnicodeEncodeError as exc:  # as psycopg refuses such a value: nothing sent
            self._batch, self._preparing = None, []
            raise PgError(f"a value cannot be sent in the connection's encoding ({exc})") from exc
        preparing, self._preparing = self._preparing, []
        try:
            self.round_trips += 1
            res = self._raw.pgconn.exec_(text)
            if res.status == ExecStatus.FATAL_ERROR:
                raise error_from_result(res, encoding=self._encoding)
        except psycopg.Error as exc:
            self._batch = None  # the transaction is over (aborted or gone): no more batching
            raise _wrap(exc) from exc
        self._prepared.update(preparing)
        for q in queued[:-1]:
            if q is not None:
                q._passed()
        last = queued[-1]
        if last is not None:
            last._got(
                self._rows_of(res), res.command_tuples if res.command_tuples is not None else -1
            )

    def _rows_of(self, res: Any) -> list[Any]:
        """The rows of a result, loaded as psycopg's cursors load them, indexable by name."""
        if not res.ntuples:
            return []
        if self._loader is None:
            from psycopg.adapt import Transformer

            self._loader = Transformer(self._raw)
        tx = self._loader
        tx.set_pgresult(res)
        make = _row_class(tuple(res.fname(i).decode() for i in range(res.nfields)))
        return list(tx.load_rows(0, res.ntuples, make))

    def _end_batch(self, commit: bool) -> Any:
        """``COMMIT``: sent with what is still queued (the second round trip); ``ROLLBACK``:
        the queue dropped, and a transaction already begun on the server rolled back."""
        batch = self._batch
        assert batch is not None
        if commit:
            batch.append("COMMIT")
            self._queued.append(None)
            try:
                self._send_batch()
            finally:
                self._batch, self._queued = None, []
            return _NO_ROWS
        from psycopg.pq import TransactionStatus

        self._batch, self._queued = None, []
        if self._raw.info.transaction_status != TransactionStatus.IDLE:
            try:
                self.round_trips += 1
                self._raw.execute("ROLLBACK")
            except Exception as exc:
                import psycopg

                if isinstance(exc, psycopg.Error):
                    raise _wrap(exc) from exc
                raise
        return _NO_ROWS

    def _pragma(self, sql: str) -> Any:
        m = re.fullmatch(r"\s*PRAGMA\s+synchronous\s*=\s*(\w+)\s*;?\s*", sql, re.I)
        if not m:
            raise PgError(f"{sql.strip()!r} is SQLite's; this log is on PostgreSQL")
        self._sync_off = m.group(1).upper() in ("NORMAL", "OFF", "0", "1")
        return _NO_ROWS  # applied with the next BEGIN: no round trip of its own

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        if self._batch is not None:
            return True  # begun, whether or not its BEGIN is sent yet
        return self._raw.info.transaction_status in (
            TransactionStatus.INTRANS,
            TransactionStatus.INERROR,
        )

    def close(self) -> None:
        self._raw.close()

    @property
    def backend(self) -> PostgresBackend:
        """Which log this connection is to (``backend.backend_of``): a PostgreSQL one."""
        return POSTGRES

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NumericLoader:
    """``numeric`` (what ``SUM`` of integers gives) as ``int`` when whole, else ``float``, as
    SQLite returns them; ``Decimal`` would reach ``json.dumps`` and fail there."""

    @staticmethod
    def make(base: Any) -> Any:
        class Loader(base):  # type: ignore[misc]
            def load(self, data: Any) -> Any:
                text = bytes(data).decode()
                try:
                    return int(text)
                except ValueError:
                    return float(text)

        return Loader


def load_driver() -> None:
    """Import psycopg and the parts of it a connection loads on first use."""
    import psycopg  # noqa: F401
    import psycopg.pq  # noqa: F401
    import psycopg.types.numeric  # noqa: F401


def connect(url: str) -> PgConnection:
    """A plain connection (no validation): the heartbeat's, and the one ``open_log`` checks."""
    import psycopg
    from psycopg.types.numeric import NumericLoader

    try:
        raw = psycopg.connect(
            str.__str__(url),
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            row_factory=_row_factory,
        )
    except (psycopg.Error, ValueError) as exc:  # ValueError: a URL Python cannot decode
        # Away for now (refused, starting up, too many connections) or wrong (no such database,
        # bad password, a URL that cannot be decoded): both exit 2 from a command, but a worker
        # waits out only the first.
        away = (
            isinstance(exc, psycopg.Error)
            and transient(_wrap(exc))
            and not any(words in str(exc) for words in _REFUSED)
        )
        cls = LogUnavailable if away else LogError
        raise cls(
            f"cannot connect to {url} ({_first_line(exc)}); check that the server runs, the "
            "database exists and the user may log in (PGPASSWORD or ~/.pgpass for a password)"
        ) from exc
    raw.adapters.register_loader("numeric", _NumericLoader.make(NumericLoader))
    return PgConnection(raw, url)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- validation and migrations ------------------------------------------------------------------


def inspect(url: str) -> int:
    """Check a database read-only and return its schema version (0 = empty, new)."""
    conn = connect(url)
    try:
        return read_version(conn, url)
    finally:
        conn.close()


IDLE_IN_TRANSACTION_S = 30
"""A writer's transaction never waits on anything but the server (no agent code runs inside
one); one idle longer belongs to a frozen process. The server then ends that session, which
releases its locks and its marker, which would otherwise hold every reader's horizon back."""


def open_log(url: str) -> PgConnection:
    """Open (creating the schema if the database is empty) a log for writing."""
    conn = connect(url)
    try:
        conn.execute(f"SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_S}s'")
        version, pg_only = read_state(conn, url)
        if version < SCHEMA_VERSION or pg_only < len(PG_ONLY):
            migrate(conn, url)
    except BaseException:
        conn.close()
        raise
    return conn


def open_readonly(url: str) -> PgConnection:
    """Open an existing log for reading; every transaction of this connection is READ ONLY."""
    conn = connect(url)
    try:
        version = read_version(conn, url)
        if version == 0:
            raise ForeignDatabase(
                f"{url} is an empty database, not a steplog log; run an agent with --db {url} first"
            )
        conn.execute("SET default_transaction_read_only = on")
    except BaseException:
        conn.close()
        raise
    return conn


def event_horizon(conn: LogConnection) -> int:
    """The highest event id a reader may read up to now: every event at or below it is settled
    (committed, or never to be), so none can appear later under an id already passed.

    Two statements, in this order: the sequence first, then the markers. A writer that takes its
    marker after the second read takes ids above the first; one that held its marker before is
    seen. Each statement must see data committed since the last (``READ COMMITTED``: the readers'
    connections are in autocommit)."""
    last = int(conn.execute(f"SELECT {_LAST_ID}").fetchone()[0])
    lowest = conn.execute(_LOWEST_MARKER).fetchone()[0]
    return last if lowest is None else min(last, int(lowest))


def lock_run(conn: LogConnection, run_id: str) -> None:
    """Take ``run_id``'s own lock until the end of the transaction (``db.run_locked``); it may
    not exist yet."""
    conn.execute(f"SELECT pg_advisory_xact_lock({RUN_NS}, hashtext(?))", (run_id,))


def primary_key(conn: LogConnection, table: str) -> list[str]:
    """The table's primary key columns, in key order."""
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND "
        "a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(?) AND i.indisprimary ORDER BY "
        "array_position(i.indkey::int2[], a.attnum)",
        (table,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def columns(conn: LogConnection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ? ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [str(r[0]) for r in rows]


def new_ids(conn: LogConnection, table: str) -> str | None:
    """The table's identity column (``GENERATED BY DEFAULT AS IDENTITY``), if it has one."""
    row = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ? AND is_identity = 'YES'",
        (table,),
    ).fetchone()
    return None if row is None else str(row[0])


def has_column(conn: LogConnection, table: str, column: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND "
            "table_name = ? AND column_name = ?",
            (table, column),
        ).fetchone()
        is not None
    )


# -- the backend --------------------------------------------------------------------------------


class PostgresBackend:
    """A log in a PostgreSQL database (``backend.Backend``; ``POSTGRES`` is the one): the
    functions above, and what differs from a file where the rest of the log asks."""

    json: JsonSql = PgJsonSql()
    is_server = True
    like_any_case = "ILIKE"
    notifies_commits = True
    space: Space = PG_SPACE
    """Readers learn of commits from the ``event`` table's notifications (``pglisten``)."""

    def load_driver(self) -> None:
        load_driver()

    def inspect(self, location: str | os.PathLike[str]) -> int:
        return inspect(os.fspath(location))

    def open_log(
        self, location: str | os.PathLike[str], *, synchronous: Synchronous
    ) -> PgConnection:
        conn = open_log(os.fspath(location))
        set_synchronous(conn, synchronous)
        return conn

    def open_readonly(self, location: str | os.PathLike[str], *, one_shot: bool) -> PgConnection:
        """A reader's connection (``one_shot`` means nothing here: no file to leave -wal beside)."""
        return open_readonly(os.fspath(location))

    def connect_plain(self, location: str | os.PathLike[str]) -> PgConnection:
        conn = connect(os.fspath(location))
        set_synchronous(conn, "NORMAL")
        return conn

    def open_follower(self, location: str | os.PathLike[str]) -> PgConnection | None:
        """``open_readonly``, or ``None`` while the database holds no log yet."""
        try:
            return open_readonly(os.fspath(location))
        except (LogError, sqlite3.Error):
            return None

    def not_ready(self, location: str | os.PathLike[str]) -> str | None:
        """Why a reader must wait: the database is empty (``inspect`` connects)."""
        if inspect(os.fspath(location)) == 0:
            return f"{location} is an empty database: waiting for the first run to create the log"
        return None

    def file_of(self, location: str | os.PathLike[str]) -> Path | None:
        """None: the log is on a server, not in a file here."""
        return None

    def hand_over(self, location: str | os.PathLike[str]) -> tuple[list[str], dict[str, str]]:
        """In the environment: a URL may carry a password, and a command line is readable by
        every user of the machine."""
        return [], {"STEPLOG_DB": str.__str__(os.fspath(location))}

    def read_engine(self, location: str | os.PathLike[str]) -> Engine:
        """A SQLAlchemy engine whose transactions are read-only."""
        from sqlalchemy import create_engine

        url = "postgresql+psycopg://" + str.__str__(os.fspath(location)).split("://", 1)[1]
        return create_engine(url, connect_args={"options": "-c default_transaction_read_only=on"})

    def has_column(self, conn: LogConnection, table: str, column: str) -> bool:
        return has_column(conn, table, column)

    def primary_key(self, conn: LogConnection, table: str) -> list[str]:
        return primary_key(conn, table)

    def columns(self, conn: LogConnection, table: str) -> list[str]:
        return columns(conn, table)

    def new_ids(self, conn: LogConnection, table: str) -> str | None:
        return new_ids(conn, table)

    def for_update(self, *, skip_locked: bool = False) -> str:
        """``FOR UPDATE``: rows are locked one by one (``SKIP LOCKED``: rows another transaction
        holds are left out instead of waited for)."""
        return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"

    def lock_run(self, conn: LogConnection, run_id: str) -> None:
        lock_run(conn, run_id)

    def announce_claimable(self, conn: LogConnection, run_id: str) -> None:
        """``NOTIFY`` on ``QUEUE_CHANNEL`` with the run's id: delivered when (and only if) the
        transaction commits."""
        conn.execute("SELECT pg_notify(?, ?)", (QUEUE_CHANNEL, run_id)).fetchall()

    def settled_upto(self, conn: LogConnection) -> int | None:
        return event_horizon(conn)

    def probe(self, conn: LogConnection, run_id: str | None) -> None:
        """Nothing: the server checks its own pages (checksums, WAL)."""

    def check(self, conn: LogConnection) -> tuple[int, list[str]]:
        return check_schema(conn)

    def is_transient(self, exc: BaseException) -> bool:
        return transient(exc)

    def server_failure(self, exc: BaseException, where: object) -> str | None:
        """One line for any error of the server (a lost connection, a restart): nothing was
        half-written, and the same command may be run again."""
        if not isinstance(exc, PgError):
            return None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (
            f"the log at {where} failed ({first}); nothing was half-written: "
            "check the server, then run the same command again"
        )


POSTGRES = PostgresBackend()
