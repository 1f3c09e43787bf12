"""The outbox's own SQLite file: idempotency keys, deliveries and every attempt. All SQL lives here.

A key goes through two transactions, which is what makes "in flight" real:

1. ``claim`` (``BEGIN IMMEDIATE``): no row for the key yet, so insert it as ``pending``. Any
   request that finds the row ``pending`` is answered 409 until step 2 commits.
2. ``complete`` (``BEGIN IMMEDIATE``): insert the delivery, mark the key ``done`` and record the
   201 attempt, all in one commit. A delivery therefore exists iff its key is ``done``.

A process killed between the two leaves a ``pending`` key and no delivery; ``release_orphans``
(run by the server at start-up) frees such keys so the sender's retry is delivered, once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from steplog.errors import CorruptDatabase, ForeignDatabase, LogError, NewerSchema
from steplog.log.db import immediate
from steplog.log.schema import split_statements
from steplog.outbox.ledger import Attempt, Delivery, JSONObject, Ledger, Outcome

# "STOB": marks the file as a steplog outbox, so neither the engine's log nor a stranger's
# database is ever mistaken for one (and modified).
APPLICATION_ID = 0x53544F42

_V1 = """
CREATE TABLE idempotency_key (
    key         TEXT PRIMARY KEY,
    body_hash   TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('pending', 'done')),
    delivery_id INTEGER REFERENCES delivery(id),
    created_at  REAL NOT NULL
);
CREATE TABLE delivery (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    key       TEXT NOT NULL UNIQUE,
    body      TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    ts        REAL NOT NULL
);
CREATE TABLE attempt (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    key       TEXT,
    body_hash TEXT,
    status    INTEGER NOT NULL,
    outcome   TEXT NOT NULL
              CHECK (outcome IN ('delivered', 'replayed', 'conflict', 'in_flight', 'rejected', 'error')),
    ts        REAL NOT NULL
);
"""

MIGRATIONS: tuple[str, ...] = (_V1,)
"""Ordered and frozen: migration ``i`` takes the file from version ``i`` to ``i + 1``."""
SCHEMA_VERSION = len(MIGRATIONS)

BUSY_TIMEOUT_MS = 10_000


StoreError = sqlite3.Error
"""What reading or writing an outbox store may raise besides ``LogError`` (its own SQLite file's
errors: the outbox is a service apart from the log, with a database of its own)."""


@dataclass(frozen=True)
class Verdict:
    """The answer to a request that did not get to deliver (it is already recorded)."""

    status: int
    outcome: Outcome
    delivery_id: int | None = None
    """The first delivery's id, for a replay."""


class OutboxStore:
    """The outbox ledger in one SQLite file.

    One connection guarded by a lock serves every handler thread: requests are tiny, and the
    lock keeps SQLite's one-writer rule inside this process instead of in ``busy_timeout``
    retries. ``BEGIN IMMEDIATE`` still guards against other processes on the same file.

    ``readonly=True`` opens an existing file without creating, migrating or locking anything,
    for readers such as tests and the monitor while a server is running.
    """

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._lock = threading.Lock()
        self._conn = self._open_readonly() if readonly else self._open_writable()

    # -- opening -------------------------------------------------------------------------

    def _open_writable(self) -> sqlite3.Connection:
        _create_private(self.path)
        conn = self._connect(str(self.path), uri=False)
        try:
            version = self._check(conn)
            # WAL: GET /messages never blocks a delivery, and a commit is one append.
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: the WAL is fsynced at each commit, so a 201 the sender saw is never lost,
            # not even to a power cut; the point of this service is to be believed.
            conn.execute("PRAGMA synchronous = FULL")
            if version < SCHEMA_VERSION:
                with immediate(conn):
                    current = int(
                        conn.execute("PRAGMA user_version").fetchone()[0]
                    )  # under the lock
                    for script in MIGRATIONS[current:]:
                        for statement in split_statements(script):
                            conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.OperationalError as exc:
            conn.close()
            raise LogError(
                f"cannot open {self.path} for writing: {exc}; check its permissions and free disk "
                "space"
            ) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_readonly(self) -> sqlite3.Connection:
        if not self.path.exists():
            raise LogError(
                f"{self.path} does not exist; start the outbox with --db {self.path} first"
            )
        conn = self._connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            if self._check(conn) == 0:
                raise ForeignDatabase(
                    f"{self.path} is an empty database, not an outbox; start the outbox on it first"
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self, target: str, *, uri: bool) -> sqlite3.Connection:
        # isolation_level=None: transactions are exactly the BEGIN/COMMIT written below.
        # check_same_thread=False: the handler threads share it, serialised by self._lock.
        conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False)
        # Wait for another process's write (a second reader, a checkpoint) instead of failing.
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        return conn

    def _check(self, conn: sqlite3.Connection) -> int:
        """Refuse a foreign, corrupt or newer file before writing anything; return its version."""
        try:
            app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise CorruptDatabase(
                f"{self.path} is not a readable SQLite database ({exc}); it was left untouched: "
                "point --db at an outbox file or a new path"
            ) from exc
        if app_id != APPLICATION_ID and (app_id or version or tables):
            raise ForeignDatabase(
                f"{self.path} is a SQLite database but not a steplog outbox; it was left "
                "untouched: "
                "point --db at an outbox file or a new path"
            )
        if version > SCHEMA_VERSION:
            raise NewerSchema(
                f"{self.path} was written by a newer steplog (outbox schema {version}); upgrade "
                "steplog"
            )
        return version

    # -- writing -------------------------------------------------------------------------

    def claim(self, key: str, body_hash: str) -> Verdict | None:
        """Take ``key`` for this request, or say why not.

        ``None``: the key was new and is now ``pending``; the caller must deliver with
        ``complete`` (or give the key back with ``abandon``). Otherwise the returned verdict
        (422 conflict, 409 in flight, 200 replay) has been recorded as an attempt.
        """
        with self._write() as conn:
            row = conn.execute(
                "SELECT body_hash, state, delivery_id FROM idempotency_key WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO idempotency_key (key, body_hash, state, created_at) VALUES (?, "
                    "?, 'pending', ?)",
                    (key, body_hash, time.time()),
                )
                return None
            stored_hash, state, delivery_id = row
            # A different body is the sender's bug whatever the timing, so it wins over 409.
            if stored_hash != body_hash:
                verdict = Verdict(422, "conflict")
            elif state == "pending":
                verdict = Verdict(409, "in_flight")
            else:
                verdict = Verdict(200, "replayed", int(delivery_id))
            self._insert_attempt(conn, key, body_hash, verdict.status, verdict.outcome)
            return verdict

    def complete(self, key: str, canonical: str, body_hash: str) -> int:
        """Deliver the message (its canonical JSON) for a claimed key; returns the delivery id."""
        with self._write() as conn:
            now = time.time()
            cur = conn.execute(
                "INSERT INTO delivery (key, body, body_hash, ts) VALUES (?, ?, ?, ?)",
                (key, canonical, body_hash, now),
            )
            delivery_id = cast(int, cur.lastrowid)
            updated = conn.execute(
                "UPDATE idempotency_key SET state = 'done', delivery_id = ? WHERE key = ? AND "
                "state = 'pending'",
                (delivery_id, key),
            ).rowcount
            if updated != 1:
                # Someone released our claim (a second server started on this file). Deliver
                # nothing rather than risk a second delivery for the key.
                raise RuntimeError(
                    f"the claim on idempotency key {key!r} was lost; nothing delivered"
                )
            self._insert_attempt(conn, key, body_hash, 201, "delivered")
            return delivery_id

    def abandon(self, key: str, body_hash: str) -> None:
        """Give a claimed key back after a failure, so the sender's retry can deliver."""
        with self._write() as conn:
            conn.execute("DELETE FROM idempotency_key WHERE key = ? AND state = 'pending'", (key,))
            self._insert_attempt(conn, key, body_hash, 500, "error")

    def record(self, key: str | None, body_hash: str | None, status: int, outcome: Outcome) -> None:
        """Record an attempt that never reached ``claim`` (no key, bad body)."""
        with self._write() as conn:
            self._insert_attempt(conn, key, body_hash, status, outcome)

    def release_orphans(self) -> int:
        """Free keys left ``pending`` by a killed server (none has a delivery); returns how many.

        Only a server starting on the file may call this: it assumes no other live server
        holds claims on the same file.
        """
        with self._write() as conn:
            return int(conn.execute("DELETE FROM idempotency_key WHERE state = 'pending'").rowcount)

    # -- reading -------------------------------------------------------------------------

    def ledger(self) -> Ledger:
        """Every delivery and attempt, read in one snapshot."""
        with self._read() as conn:
            deliveries = tuple(
                Delivery(id=i, key=k, body=_loads_object(body), ts=ts)
                for i, k, body, ts in conn.execute(
                    "SELECT id, key, body, ts FROM delivery ORDER BY id"
                )
            )
            attempts = tuple(
                Attempt(
                    id=i, key=k, status=status, outcome=cast(Outcome, outcome), ts=ts, body_hash=h
                )
                for i, k, status, outcome, ts, h in conn.execute(
                    "SELECT id, key, status, outcome, ts, body_hash FROM attempt ORDER BY id"
                )
            )
        return Ledger(deliveries=deliveries, attempts=attempts)

    def in_flight(self) -> list[str]:
        """Keys claimed but not yet delivered."""
        with self._read() as conn:
            return [
                k
                for (k,) in conn.execute(
                    "SELECT key FROM idempotency_key WHERE state = 'pending' ORDER BY key"
                )
            ]

    # -- plumbing ------------------------------------------------------------------------

    @staticmethod
    def _insert_attempt(
        conn: sqlite3.Connection,
        key: str | None,
        body_hash: str | None,
        status: int,
        outcome: Outcome,
    ) -> None:
        conn.execute(
            "INSERT INTO attempt (key, body_hash, status, outcome, ts) VALUES (?, ?, ?, ?, ?)",
            (key, body_hash, status, outcome, time.time()),
        )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise LogError(
                f"{self.path} was opened read-only; open OutboxStore without readonly to write"
            )
        with self._lock, immediate(self._conn) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # An explicit read transaction: the listed deliveries and attempts agree with each other.
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> OutboxStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _create_private(path: Path) -> None:
    """Create the parent directory 0700 (if we make it) and the file 0600, before SQLite opens
    it."""
    if path.is_dir():
        raise LogError(f"{path} is a directory; give --db a file path such as {path}/outbox.db")
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise LogError(
            f"cannot create {path}: {exc.strerror}; choose a writable --db path"
        ) from exc


def _loads_object(text: str) -> JSONObject:
    value: Any = json.loads(text)
    if not isinstance(value, dict):
        raise CorruptDatabase(f"a delivery body in the outbox is not a JSON object: {text[:80]!r}")
    return value
