"""The log in a SQLite file: opening it, every PRAGMA in one place, checking it, migrating it.

A file is *checked read-only before anything writes to it*: a foreign, corrupt or newer file is
refused with a ``LogError`` and its bytes stay exactly as they were. ``SqliteBackend`` is the
SQLite side of ``backend.Backend`` (the PostgreSQL side is ``pg.PostgresBackend``); the functions
below are what it does, and ``steplog.log.db`` opens any log through it.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import (
    CorruptDatabase,
    ForeignDatabase,
    LogError,
    LogUnavailable,
    NewerSchema,
    ReadOnlyLog,
)
from steplog.log import openfiles
from steplog.log.connection import LogConnection, Synchronous, immediate
from steplog.log.jsonsql import JsonSql
from steplog.log.location import private_dir
from steplog.log.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION, split_statements
from steplog.log.space import FILE_SPACE, Space

if TYPE_CHECKING:
    from sqlalchemy import Engine

SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 10_000
PAGE_SIZE = 1024


def apply_pragmas(conn: sqlite3.Connection, *, readonly: bool, synchronous: Synchronous) -> None:
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
    # A new log frees the pages of pruned runs back to the file system (``PRAGMA
    # incremental_vacuum``
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


def _read_ids(path: Path, header: bytes | None) -> tuple[sqlite3.Connection, int, int, list[str]]:
    """The read connection, and (application_id, user_version, table names) of a SQLite file.

    Read through SQLite, not from the header bytes: a fresh log's first pages may still live only
    in the -wal file. ``header`` is ``None`` when this process holds the file open (``openfiles``):
    it is then known to be SQLite and is read through an ordinary read-only connection; otherwise
    as a one-shot reader (``connect_readonly``). The connection is returned open: the caller
    closes it.
    """
    try:
        conn = connect_readonly(path, one_shot=header is not None)
        try:
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except BaseException:
            conn.close()
            raise
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and not is_damage(exc):
            raise LogError(
                f"cannot read {path} ({exc}); check its permissions and its folder's: beside a "
                "-wal file SQLite needs a -shm file it can open"
            ) from exc
        raise CorruptDatabase(
            f"{path} is a damaged SQLite file ({exc}); it was left untouched: "
            "restore it from a backup or point --db at a new path"
        ) from exc
    return conn, app_id, version, tables


def inspect(path: Path, held: list[sqlite3.Connection] | None = None) -> int:
    """Check an existing file read-only and return its schema version (0 = empty, new).

    Raises ``CorruptDatabase``, ``ForeignDatabase`` or ``NewerSchema``; never writes. ``held``:
    the check's read connection is put there, open, for the caller to close (``open_log``).
    """
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
        conn, app_id, version, tables = _read_ids(path, header)
    try:
        checked = _check_ids(path, app_id, version, tables)
    except BaseException:
        conn.close()
        raise
    if held is None:
        conn.close()
    else:
        held.append(conn)
    return checked


def _check_ids(path: Path, app_id: int, version: int, tables: list[str]) -> int:
    """``inspect``'s verdict on what a file's ids say it is."""
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
            f"{path} was written by a newer steplog (schema {version}, this one knows "
            f"{SCHEMA_VERSION}); "
            "upgrade steplog to use it"
        )
    # Our application_id is a claim, not a proof: the tables must be the ones the schema makes.
    if version == 0 and tables:
        raise ForeignDatabase(
            f"{path} carries steplog's application_id but is not a steplog log (schema 0 with "
            "tables of "
            f"its own: {', '.join(sorted(tables)[:5])}); it was left untouched: point --db at a "
            "steplog log or a new path"
        )
    missing = expected_tables(version) - set(tables)
    if missing:
        raise CorruptDatabase(
            f"{path} is a steplog log (schema {version}) without its table(s) "
            f"{', '.join(sorted(missing))}; "
            "it was left untouched: restore it from a backup or point --db at a new path"
        )
    return int(version)


_TABLE_DDL = re.compile(
    r"^\s*(CREATE TABLE|DROP TABLE|ALTER TABLE)\s+(?:IF (?:NOT "
    r")?EXISTS\s+)?\"?(\w+)\"?(?:\s+RENAME TO\s+\"?(\w+)\"?)?",
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


def transient(exc: BaseException) -> bool:
    """Is this SQLite error the file being away for now (``db.is_transient`` asks): still locked
    past the busy timeout, an I/O error or a full disk? No for a damaged or read-only file, or a
    statement SQLite refuses: those stay wrong however long one waits."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    if is_damage(exc) or is_read_only(exc):
        return False
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith(_AWAY) if name else any(t in str(exc) for t in _AWAY_TEXT)


def read_only_log(path: object, why: str) -> ReadOnlyLog:
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


def migrate(conn: sqlite3.Connection) -> None:
    if pending_migrations(conn) <= 0:
        return
    with immediate(conn):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # re-read under the lock
        for step in MIGRATIONS[version:]:
            for statement in split_statements(step):
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def open_log(path: Path, *, synchronous: Synchronous = "FULL") -> sqlite3.Connection:
    """Open (creating if needed) a log file for writing: validated, migrated, WAL, private."""
    # The check's read connection stays open until the writer has read the file: a killed
    # engine's log has a WAL, and the first connection to open it reads the whole of it to rebuild
    # its index (-shm); the writer, not the first, finds that index built (~1 ms of a relaunch).
    checking: list[sqlite3.Connection] = []
    try:
        with openfiles.guarded:  # no other thread's plain open between the check and the connection
            if path.exists():
                inspect(path, checking)
                _require_writable(path)
            else:
                _create_private(path)
            conn = openfiles.connect(path, str(path), isolation_level=None, check_same_thread=False)
        apply_pragmas(conn, readonly=False, synchronous=synchronous)
        _close(checking)  # the writer has read the file: the index is its too now
        migrate(conn)
    except sqlite3.OperationalError as exc:
        cls = LogUnavailable if transient(exc) else LogError
        raise cls(
            f"cannot open {path} for writing: {exc}; check the path, its permissions "
            "and free disk space"
        ) from exc
    except sqlite3.DatabaseError as exc:
        raise CorruptDatabase(
            f"{path} is a damaged SQLite file ({exc}); restore it or use a new --db"
        ) from exc
    finally:
        _close(checking)
    return conn


def _close(connections: list[sqlite3.Connection]) -> None:
    while connections:
        connections.pop().close()


def open_readonly(path: Path, *, one_shot: bool = False) -> sqlite3.Connection:
    """Open an existing log file for reading only; refuses missing, foreign and corrupt files.

    ``one_shot``: for a reader that closes the connection within one command (see
    ``connect_readonly``)."""
    if not path.exists():
        raise LogError(
            f"{path} does not exist; run an agent first or pass --db with an existing log"
        )
    with openfiles.guarded:  # no other thread's plain open between the check and the connection
        version = inspect(path)
        if version == 0:
            raise ForeignDatabase(
                f"{path} is an empty database, not a steplog log; run an agent with --db {path} "
                "first"
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
        apply_pragmas(conn, readonly=True, synchronous="FULL")
    except sqlite3.DatabaseError as exc:
        raise CorruptDatabase(
            f"{path} cannot be read ({exc}); restore it or use another --db"
        ) from exc
    return conn


def connect_plain(path: Path) -> sqlite3.Connection:
    """A second connection to a log already opened and checked (the lease heartbeat's): no
    validation, no migration, at ``synchronous = NORMAL`` (a lost renewal only shortens the
    lease)."""
    conn = sqlite3.connect(
        str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
    )
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def open_follower(path: Path) -> sqlite3.Connection | None:
    """A read-only connection that follows a log an engine is about to create (the kill test's
    watch): ``None`` while there is no file or SQLite cannot open it yet. Not validated: the
    engine that makes the file does that, and a read before its schema exists fails, to be tried
    again with a fresh connection."""
    if not path.exists():
        return None
    try:
        return sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None, timeout=5
        )
    except sqlite3.Error:
        return None


def has_column(conn: LogConnection, table: str, column: str) -> bool:
    return (
        conn.execute(
            f"SELECT 1 FROM pragma_table_info('{table}') WHERE name = ?", (column,)
        ).fetchone()
        is not None
    )


def columns(conn: LogConnection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")')]


def new_ids(conn: LogConnection, table: str) -> str | None:
    """The table's ``INTEGER PRIMARY KEY``, SQLite's alias of the rowid, if it has one."""
    pk = [r for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5]]
    return str(pk[0][1]) if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else None


def primary_key(conn: LogConnection, table: str) -> list[str]:
    """The table's primary key columns, in key order (none: a rowid table without one)."""
    pk = sorted((r[5], r[1]) for r in conn.execute(f"PRAGMA table_info({table})") if r[5])
    return [str(name) for _, name in pk]


_PROBES = (
    # the run row, and where a new run row and its primary-key entry go
    ("SELECT * FROM run WHERE id = ?", True),
    ("SELECT * FROM run WHERE rowid = (SELECT max(rowid) FROM run)", False),
    # the run's steps read in full (replay reads them all), and where new step rows go
    (
        "SELECT max(length(name) + coalesce(length(decision), 0) + coalesce(length(result), 0) + "
        "coalesce(length(error), 0)) FROM step WHERE run_id = ?",
        True,
    ),
    ("SELECT * FROM step WHERE run_id = ? ORDER BY seq DESC LIMIT 1", True),
    ("SELECT * FROM step ORDER BY run_id DESC, seq DESC LIMIT 1", False),  # root to last leaf
    # the run's effects in full, and where new ledger rows and their keys go
    (
        "SELECT max(length(key) + length(target) + coalesce(length(response), 0)) FROM effect "
        "WHERE run_id = ?",
        True,
    ),
    ("SELECT key FROM effect WHERE key >= ? ORDER BY key LIMIT 1", True),
    ("SELECT * FROM effect WHERE rowid = (SELECT max(rowid) FROM effect)", False),
    # where the run's next event row and its index entry go
    ("SELECT id FROM event WHERE run_id = ? ORDER BY id DESC LIMIT 1", True),
    ("SELECT * FROM event WHERE id = (SELECT max(id) FROM event)", False),
    ("SELECT * FROM sqlite_sequence", False),
)


def probe(conn: LogConnection, run_id: str | None) -> None:
    """Read every page the engine is about to touch for ``run_id`` (``integrity.probe``): a
    damaged one raises SQLite's "malformed" error here rather than in the middle of a write."""
    for sql, takes_run in _PROBES:
        if takes_run and run_id is None:
            continue
        conn.execute(sql, (run_id,) if takes_run else ()).fetchall()


def check(conn: LogConnection) -> tuple[int, list[str]]:
    """(schema version, problems) by ``PRAGMA integrity_check``. SQLite aborts a whole
    ``integrity_check`` at the first page it cannot read at all, so then each table is checked
    on its own, to say which ones are damaged."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    try:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return version, list(_table_by_table(conn)) or [f"the file as a whole: {exc}"]
    if rows == ["ok"]:
        return version, []
    return version, [r.removeprefix("*** in database main ***\n") for r in rows]


def _table_by_table(conn: LogConnection) -> Any:
    tables = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    for table in tables:
        try:
            rows = [r[0] for r in conn.execute(f'PRAGMA integrity_check("{table}")')]
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            yield f"table {table}: its pages cannot be read ({exc})"
            continue
        if rows != ["ok"]:
            yield from (
                f"table {table}: {r.removeprefix('*** in database main ***' + chr(10))}"
                for r in rows
            )


def read_engine(path: Path) -> Engine:
    """A SQLAlchemy engine that can only read the file (``mode=ro``), with a busy timeout."""
    from sqlalchemy import create_engine
    from sqlalchemy import event as sa_event

    engine = create_engine(f"sqlite:///{Path(path).resolve().as_uri()}?mode=ro&uri=true")

    @sa_event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    return engine


class SqliteBackend:
    """A log in a SQLite file on this machine (``backend.Backend``; ``SQLITE`` is the one)."""

    json: JsonSql = JsonSql()
    is_server = False
    notifies_commits = False
    space: Space = FILE_SPACE
    like_any_case = "LIKE"

    def load_driver(self) -> None:
        """Nothing: SQLite's module is loaded with the log package."""

    def inspect(self, location: str | os.PathLike[str]) -> int:
        return inspect(Path(location))

    def open_log(
        self, location: str | os.PathLike[str], *, synchronous: Synchronous
    ) -> sqlite3.Connection:
        return open_log(Path(location), synchronous=synchronous)

    def open_readonly(
        self, location: str | os.PathLike[str], *, one_shot: bool
    ) -> sqlite3.Connection:
        return open_readonly(Path(location), one_shot=one_shot)

    def connect_plain(self, location: str | os.PathLike[str]) -> sqlite3.Connection:
        return connect_plain(Path(location))

    def open_follower(self, location: str | os.PathLike[str]) -> sqlite3.Connection | None:
        return open_follower(Path(location))

    def not_ready(self, location: str | os.PathLike[str]) -> str | None:
        path = Path(location)
        if path.exists() and inspect(path) == 0:
            return f"{path} is empty: waiting for the first run to create it"
        return None

    def file_of(self, location: str | os.PathLike[str]) -> Path | None:
        return Path(location)

    def hand_over(self, location: str | os.PathLike[str]) -> tuple[list[str], dict[str, str]]:
        return ["--db", os.fspath(location)], {}

    def read_engine(self, location: str | os.PathLike[str]) -> Engine:
        return read_engine(Path(location))

    def has_column(self, conn: LogConnection, table: str, column: str) -> bool:
        return has_column(conn, table, column)

    def primary_key(self, conn: LogConnection, table: str) -> list[str]:
        return primary_key(conn, table)

    def columns(self, conn: LogConnection, table: str) -> list[str]:
        return columns(conn, table)

    def new_ids(self, conn: LogConnection, table: str) -> str | None:
        return new_ids(conn, table)

    def for_update(self, *, skip_locked: bool = False) -> str:
        """None: a write transaction holds the whole file's write lock."""
        return ""

    def lock_run(self, conn: LogConnection, run_id: str) -> None:
        """Nothing: the transaction holds the whole file's write lock."""

    def announce_claimable(self, conn: LogConnection, run_id: str) -> None:
        """Nothing: a file has no one to tell; its workers poll."""

    def settled_upto(self, conn: LogConnection) -> int | None:
        """All of it: an event id is taken under the write lock, so ids commit in order."""
        return None

    def probe(self, conn: LogConnection, run_id: str | None) -> None:
        probe(conn, run_id)

    def check(self, conn: LogConnection) -> tuple[int, list[str]]:
        return check(conn)

    def is_transient(self, exc: BaseException) -> bool:
        return transient(exc)

    def server_failure(self, exc: BaseException, where: object) -> str | None:
        """None: a file's failures are its own (``db.explain_failure``)."""
        return None


SQLITE = SqliteBackend()
