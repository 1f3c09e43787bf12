"""Opening the log: validation, every PRAGMA in one place, migrations, private file modes.

A file is *checked read-only before anything writes to it*: a foreign, corrupt or newer file is
refused with a ``LogError`` and its bytes stay exactly as they were.

The log is a SQLite file or, for a ``postgresql://`` location, a PostgreSQL database
(``steplog.log.pg``, imported only then). Every public function here takes either
(``location.LogLocation``) and returns a ``LogConnection``: the sqlite3 subset the engine uses,
which ``pg.PgConnection`` speaks too.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, overload

from steplog.errors import (
    CorruptDatabase,
    ForeignDatabase,
    LogError,
    LogUnavailable,
    NewerSchema,
    ReadOnlyLog,
)
from steplog.log import interrupts, openfiles
from steplog.log.location import LogLocation, PgUrl, resolve
from steplog.log.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, split_statements

if TYPE_CHECKING:
    from steplog.log.pg import PgConnection


class LogCursor(Protocol):
    """What the engine reads from a statement (``sqlite3.Cursor`` and psycopg's cursor)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Any: ...


class LogConnection(Protocol):
    """The sqlite3 subset the engine uses on a log: ``sqlite3.Connection`` (``isolation_level=None``,
    transactions by SQL) or ``pg.PgConnection``. Rows index by position and by column name."""

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
a failed write, a lost server, a damaged page. ``is_transient`` tells the passing ones apart."""

LogOperationFailed = sqlite3.OperationalError
"""A ``LogFailure`` of the moment (locked, busy, connection lost, disk full) rather than of the data."""


@contextmanager
def named_rows(conn: C) -> Iterator[C]:
    """Rows read inside the block index by column name too (``LogRow``); the connection's plain
    tuples come back after it (the engine's hot path reads by position)."""
    prior = conn.row_factory
    conn.row_factory = sqlite3.Row
    try:
        yield conn
    finally:
        conn.row_factory = prior


def set_synchronous(conn: LogConnection, level: Synchronous) -> None:
    """How durable the connection's next commits are: ``FULL`` (survives power loss) or
    ``NORMAL`` (survives a kill); see ``_apply_pragmas``. PostgreSQL: ``synchronous_commit``."""
    conn.execute(f"PRAGMA synchronous = {level}")


def is_postgres(conn: object) -> bool:
    """Is this log connection on PostgreSQL? (for the few things only SQLite has: PRAGMAs,
    page probes, ``integrity_check``)."""
    return getattr(conn, "dialect", "sqlite") == "postgresql"


def has_column(conn: LogConnection, table: str, column: str) -> bool:
    """Does the log's ``table`` have ``column`` (a schema-1 file read without migrating it has not)?"""
    if is_postgres(conn):
        from steplog.log import pg

        return pg.has_column(conn, table, column)  # type: ignore[arg-type]
    return (
        conn.execute(
            f"SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?", (column,)
        ).fetchone()
        is not None
    )


def load_driver(location: LogLocation) -> None:
    """Import what opening this log takes, before the engine takes over the stop signals: a
    stop landing inside an import is raised where nobody can handle it (an import lock's
    callback). SQLite's module is loaded already; psycopg only for a PostgreSQL log."""
    if isinstance(location, PgUrl):
        from steplog.log import pg

        pg.load_driver()


def connect_plain(location: LogLocation) -> LogConnection:
    """A second connection to a log already opened and checked (the lease heartbeat's): no
    validation, no migration; SQLite at ``synchronous = NORMAL`` (a lost renewal only shortens
    the lease)."""
    if isinstance(location, PgUrl):
        from steplog.log import pg

        conn: LogConnection = pg.connect(location)
    else:
        conn = sqlite3.connect(
            str(location),
            isolation_level=None,
            timeout=BUSY_TIMEOUT_MS / 1000,
            check_same_thread=False,
        )
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


Synchronous = Literal["FULL", "NORMAL"]

SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 10_000
PAGE_SIZE = 1024


def default_db_path() -> LogLocation:
    """``$STEPLOG_DB``, else ``steplog.db`` in the user data directory (created 0700)."""
    return resolve(None)


def location(db: str | os.PathLike[str] | None) -> LogLocation:
    """``--db`` as given (a path or a ``postgresql://`` URL), else the default."""
    return resolve(db)


def _apply_pragmas(conn: sqlite3.Connection, *, readonly: bool, synchronous: Synchronous) -> None:
    # Wait for a competing writer instead of failing at once with SQLITE_BUSY. Two engines racing
    # for a lease, or the monitor reading during a checkpoint, are normal and short.
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if readonly:
        return
    # 1 KiB pages (SQLite's default is 4 KiB): a step's two commits change about six pages each
    # (run row, step row, event row, their index entries, the id counter), and every changed page
    # is appended to the WAL whole and, at FULL, fsynced. Measured here: 47.6 -> 13.5 KB written
    # per no-op step, durable steps/s +16-30 %. Only a new, empty file takes it; an existing log
    # keeps the page size it was made with (a page size is fixed once WAL is on).
    conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
    # A new log frees the pages of pruned runs back to the file system (``PRAGMA incremental_vacuum``
    # after ``steplog prune``). It must be chosen before the first table, and before WAL; an older
    # log keeps auto_vacuum NONE until a ``steplog prune --vacuum`` rewrites it.
    if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    # WAL: readers (status, the monitor) never block the engine's writes, and a commit is one
    # sequential append. Persistent in the file once set.
    _use_wal(conn)
    # FULL: the WAL is fsynced at every commit, so a committed checkpoint survives power loss.
    # NORMAL survives process crashes (every kill test) but may lose the last commits on power
    # loss; it is offered as an option, never the default.
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    # Fold the WAL back into the file every 4,000 pages (SQLite's default is 1,000): with 1 KiB
    # pages that is the same 4 MB of WAL as the default with 4 KiB pages, and a checkpoint (two
    # more fsyncs at FULL) every ~360 no-op steps instead of every ~90.
    conn.execute("PRAGMA wal_autocheckpoint = 4000")
    # Referential checks cost a lookup per insert on the hot path; the engine is the only
    # writer and writes parents first.
    conn.execute("PRAGMA foreign_keys = OFF")


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL unless the file already is. Switching needs an exclusive lock and SQLite
    may report SQLITE_BUSY at once instead of waiting (two engines creating one new log at the
    same moment), so it is retried up to the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode != "wal":  # a refused switch returns the old mode rather than failing
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if mode == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if time.monotonic() > deadline:
            raise sqlite3.OperationalError("database is locked (could not switch it to WAL)")
        time.sleep(0.005)


def _read_header(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(100)
    except PermissionError as exc:
        raise LogError(
            f"cannot read {path}: permission denied; fix its permissions or use another --db"
        ) from exc
    except IsADirectoryError as exc:
        raise LogError(
            f"{path} is a directory; give --db a file path such as {path}/steplog.db"
        ) from exc


def _read_ids(path: Path, header: bytes | None) -> tuple[int, int, list[str]]:
    """(application_id, user_version, table names) of a SQLite file.

    Read through SQLite, not from the header bytes: a fresh log's first pages may still live only
    in the -wal file. ``header`` is ``None`` when this process holds the file open (``openfiles``):
    it is then known to be SQLite and is read through an ordinary read-only connection; otherwise
    as a one-shot reader (``connect_readonly``).
    """
    try:
        conn = connect_readonly(path, one_shot=header is not None)
        try:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and not is_damage(exc):
            raise LogError(
                f"cannot read {path} ({exc}); check its permissions and its folder's: beside a -wal file "
                "SQLite needs a -shm file it can open"
            ) from exc
        raise CorruptDatabase(
            f"{path} is a damaged SQLite file ({exc}); it was left untouched: "
            "restore it from a backup or point --db at a new path"
        ) from exc
    return app_id, version, tables


def inspect(path: LogLocation) -> int:
    """Check an existing file read-only and return its schema version (0 = empty, new).

    Raises ``CorruptDatabase``, ``ForeignDatabase`` or ``NewerSchema``; never writes.
    """
    if isinstance(path, PgUrl):
        from steplog.log import pg

        return pg.inspect(path)
    with openfiles.guarded:
        # Header bytes only from a file no connection of ours holds (see ``openfiles``).
        header = None if openfiles.held(path) else _read_header(path)
        if header is not None and not header:
            return 0  # an empty file is an empty database
        if header is not None and (len(header) < 100 or not header.startswith(SQLITE_HEADER)):
            raise CorruptDatabase(
                f"{path} is not a SQLite database (corrupt, truncated or another kind of file); "
                "it was left untouched: point --db at a steplog log or a new path"
            )
        app_id, version, tables = _read_ids(path, header)
    if app_id != APPLICATION_ID:
        if app_id == 0 and not tables and version == 0:
            return 0
        what = (
            f"application_id {app_id:#x}" if app_id else f"tables: {', '.join(sorted(tables)[:5])}"
        )
        raise ForeignDatabase(
            f"{path} is a SQLite database but not a steplog log ({what}); "
            "it was left untouched: point --db at a steplog log or a new path"
        )
    if version > SCHEMA_VERSION:
        raise NewerSchema(
            f"{path} was written by a newer steplog (schema {version}, this one knows {SCHEMA_VERSION}); "
            "upgrade steplog to use it"
        )
    # Our application_id is a claim, not a proof: the tables must be the ones the schema makes.
    if version == 0 and tables:
        raise ForeignDatabase(
            f"{path} carries steplog's application_id but is not a steplog log (schema 0 with tables of "
            f"its own: {', '.join(sorted(tables)[:5])}); it was left untouched: point --db at a steplog log or a new path"
        )
    missing = expected_tables(version) - set(tables)
    if missing:
        raise CorruptDatabase(
            f"{path} is a steplog log (schema {version}) without its table(s) {', '.join(sorted(missing))}; "
            "it was left untouched: restore it from a backup or point --db at a new path"
        )
    return int(version)


_TABLE_DDL = re.compile(
    r"^\s*(CREATE TABLE|DROP TABLE|ALTER TABLE)\s+(?:IF (?:NOT )?EXISTS\s+)?\"?(\w+)\"?"
    r"(?:\s+RENAME TO\s+\"?(\w+)\"?)?",
    re.I | re.M,
)


@cache
def expected_tables(version: int) -> frozenset[str]:
    """The tables a log at schema ``version`` has, read off the migrations' ``CREATE``, ``DROP``
    and ``RENAME`` statements. (Running them on an in-memory database gives the same set, which a
    test checks for every version, but costs ~9 ms on every engine start.)"""
    tables: set[str] = set()
    for step in MIGRATIONS[:version]:
        for verb, name, renamed in _TABLE_DDL.findall(step):
            verb = verb.upper()
            if verb == "CREATE TABLE":
                tables.add(name)
            elif verb == "DROP TABLE":
                tables.discard(name)
            elif renamed:
                tables.discard(name)
                tables.add(renamed)
        if re.search(r"\bAUTOINCREMENT\b", step, re.I):
            tables.add("sqlite_sequence")  # SQLite's own, made with the first AUTOINCREMENT table
    return frozenset(tables)


def is_damage(exc: BaseException) -> bool:
    """Does this SQLite error mean the file's bytes are damaged (not busy, locked or full)?"""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name:
        return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
    return "malformed" in str(exc) or "not a database" in str(exc)


def is_read_only(exc: BaseException) -> bool:
    """Does this SQLite error mean the log (or its folder) cannot be written?"""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith("SQLITE_READONLY") or "readonly database" in str(exc)


_AWAY = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_FULL",
    "SQLITE_CANTOPEN",
    "SQLITE_PROTOCOL",
)
_AWAY_TEXT = (
    "database is locked",
    "database table is locked",
    "disk I/O error",
    "unable to open database file",
    "database or disk is full",
)
"""SQLite errors of a log that is away for now (by name; by text where an error has no name)."""


def is_transient(exc: BaseException) -> bool:
    """Is the log only away for now, so that the same work may succeed later on a new connection?

    Yes for ``LogUnavailable``; on PostgreSQL for a lost, closed or refused connection, a server
    shutting down, restarting or short of connections, a deadlock or timeout (``pg.transient``);
    on SQLite for a file still locked past the busy timeout, an I/O error or a full disk. No for
    a damaged, foreign, newer or read-only log, or a statement the log refuses: those stay wrong
    however long one waits."""
    if isinstance(exc, LogUnavailable):
        return True
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if getattr(exc, "sqlstate", False) is not False:  # a PostgreSQL log (steplog.log.pg.PgError)
        from steplog.log import pg

        return pg.transient(exc)
    if is_damage(exc) or is_read_only(exc):
        return False
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith(_AWAY) if name else any(t in str(exc) for t in _AWAY_TEXT)


def read_only_log(path: LogLocation, why: str) -> ReadOnlyLog:
    return ReadOnlyLog(
        f"{path} cannot be written ({why}); steplog run records every step there: make it writable "
        "or pass --db a writable path (status, runs and check can still read it)"
    )


def _require_writable(path: Path) -> None:
    """Refuse, before SQLite touches it, a log that ``run`` could not write. SQLite itself would
    open it read-only without a word and fail at the first write, with -wal and -shm files left."""
    folder = path.parent
    if not os.access(path, os.W_OK):
        raise read_only_log(path, "the file is read-only")
    sidecars_writable = all(os.access(f"{path}{s}", os.W_OK) for s in ("-wal", "-shm"))
    if not os.access(folder, os.W_OK | os.X_OK) and not sidecars_writable:
        raise read_only_log(
            path,
            f"its folder {folder} is read-only, and SQLite keeps -wal and -shm files beside a log",
        )


def connect_readonly(path: Path, *, one_shot: bool) -> sqlite3.Connection:
    """A connection to ``path`` that can only read.

    A *one-shot* reader (``inspect``, ``status``, ``check``) opens an idle log (no -wal beside
    it: no connection has it open) as ``immutable``: a plain read-only open of a WAL-mode file
    creates -wal and -shm files it then cannot remove. A long-lived reader (the monitor) must see
    later commits, which ``immutable`` forbids, so it always opens ``mode=ro``.
    """
    return sqlite3.connect(
        _readonly_uri(path, one_shot=one_shot),
        uri=True,
        isolation_level=None,
        check_same_thread=False,
    )


def _readonly_uri(path: Path, *, one_shot: bool) -> str:
    immutable = "&immutable=1" if one_shot and not Path(f"{path}-wal").exists() else ""
    return f"{path.resolve().as_uri()}?mode=ro{immutable}"


def private_dir(path: Path) -> Path:
    """Make ``path`` and any missing parents with mode 0700 (``mkdir -p`` gives parents 0755)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o700, exist_ok=True)
    return path


def _create_private(path: Path) -> None:
    """Create the data directory 0700 (if we make it) and the file 0600, atomically."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LogError(
            f"cannot create {path}: {exc.strerror}; choose a writable --db path"
        ) from exc


def pending_migrations(conn: LogConnection) -> int:
    """How many migrations a connected log still needs (read-only check)."""
    return SCHEMA_VERSION - int(conn.execute("PRAGMA user_version").fetchone()[0])


def _migrate(conn: sqlite3.Connection) -> None:
    if pending_migrations(conn) <= 0:
        return
    with immediate(conn):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # re-read under the lock
        for step in MIGRATIONS[version:]:
            for statement in split_statements(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


RUN_WRITE = "BEGIN IMMEDIATE -- run_write"
"""How a write transaction of one run's rows begins (``run_write``). SQLite reads it as
``BEGIN IMMEDIATE`` (the comment is a comment); PostgreSQL takes no database-wide lock for it
(``steplog.log.pg``): the transaction must lock the run row before it reads anything it decides on,
with the fence ``UPDATE`` or ``for_update``."""


@contextmanager
def immediate(conn: C) -> Iterator[C]:
    """A write transaction that takes the write lock up front.

    A deferred transaction that reads and then writes fails with SQLITE_BUSY *without waiting*
    when another writer got in between; ``BEGIN IMMEDIATE`` waits on ``busy_timeout`` instead.
    On PostgreSQL it is a database-wide advisory lock, for the few transactions that are not one
    run's (creating a run, run control); see ``run_write``.
    """
    with interrupts.critical(), rolled_back_on_error(conn):
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("COMMIT")


@contextmanager
def run_write(conn: C) -> Iterator[C]:
    """A write transaction of one run's rows: ``immediate`` on SQLite; on PostgreSQL, writers of
    different runs commit side by side. The block locks the run row first (``for_update``)."""
    with interrupts.critical(), rolled_back_on_error(conn):
        conn.execute(RUN_WRITE)
        yield conn
        conn.execute("COMMIT")


def for_update(conn: object, *, skip_locked: bool = False) -> str:
    """The row-locking clause for a ``SELECT`` in a write transaction: none on SQLite, where the
    write lock covers the database; ``FOR UPDATE`` on PostgreSQL (``SKIP LOCKED``: rows another
    transaction holds are left out instead of waited for)."""
    if not is_postgres(conn):
        return ""
    return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"


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


@overload
def open_log(path: Path, *, synchronous: Synchronous = "FULL") -> sqlite3.Connection: ...
@overload
def open_log(path: PgUrl, *, synchronous: Synchronous = "FULL") -> PgConnection: ...
@overload
def open_log(path: LogLocation, *, synchronous: Synchronous = "FULL") -> LogConnection: ...
def open_log(path: LogLocation, *, synchronous: Synchronous = "FULL") -> LogConnection:
    """Open (creating if needed) a log for writing: validated, migrated, WAL, private."""
    if isinstance(path, PgUrl):
        from steplog.log import pg

        pconn = pg.open_log(path)
        pconn.execute(f"PRAGMA synchronous = {synchronous}")
        return pconn
    path = Path(path)
    try:
        with openfiles.guarded:  # no other thread's plain open between the check and the connection
            if path.exists():
                inspect(path)
                _require_writable(path)
            else:
                _create_private(path)
            conn = openfiles.connect(path, str(path), isolation_level=None, check_same_thread=False)
        _apply_pragmas(conn, readonly=False, synchronous=synchronous)
        _migrate(conn)
    except sqlite3.OperationalError as exc:
        cls = LogUnavailable if is_transient(exc) else LogError
        raise cls(
            f"cannot open {path} for writing: {exc}; check the path, its permissions "
            "and free disk space"
        ) from exc
    except sqlite3.DatabaseError as exc:
        raise CorruptDatabase(
            f"{path} is a damaged SQLite file ({exc}); restore it or use a new --db"
        ) from exc
    return conn


@overload
def open_readonly(path: Path, *, one_shot: bool = False) -> sqlite3.Connection: ...
@overload
def open_readonly(path: PgUrl, *, one_shot: bool = False) -> PgConnection: ...
@overload
def open_readonly(path: LogLocation, *, one_shot: bool = False) -> LogConnection: ...
def open_readonly(path: LogLocation, *, one_shot: bool = False) -> LogConnection:
    """Open an existing log for reading only; refuses missing, foreign and corrupt files.

    ``one_shot``: for a reader that closes the connection within one command (see
    ``connect_readonly``)."""
    if isinstance(path, PgUrl):
        from steplog.log import pg

        return pg.open_readonly(path)
    path = Path(path)
    if not path.exists():
        raise LogError(
            f"{path} does not exist; run an agent first or pass --db with an existing log"
        )
    with openfiles.guarded:  # no other thread's plain open between the check and the connection
        version = inspect(path)
        if version == 0:
            raise ForeignDatabase(
                f"{path} is an empty database, not a steplog log; run an agent with --db {path} first"
            )
        try:
            conn = openfiles.connect(
                path,
                _readonly_uri(path, one_shot=one_shot),
                uri=True,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.DatabaseError as exc:
            raise CorruptDatabase(
                f"{path} cannot be read ({exc}); restore it or use another --db"
            ) from exc
    try:
        _apply_pragmas(conn, readonly=True, synchronous="FULL")
    except sqlite3.DatabaseError as exc:
        raise CorruptDatabase(
            f"{path} cannot be read ({exc}); restore it or use another --db"
        ) from exc
    return conn
