"""Read-only access to a steplog log, Qt-free: since-bookmark event queries and change checks.

The monitor never writes the log and never holds a read transaction between refreshes: every
query runs in autocommit mode, so SQLite opens and closes a read snapshot around it (an open
reader would stop WAL checkpoints and let the -wal file grow without bound).

A file that is deleted, replaced, foreign or corrupt raises ``LogUnavailable`` with a message
for the window; nothing here ever modifies the file.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from steplog.db import inspect, open_readonly
from steplog.openfiles import identity
from steplog.errors import LogError


class LogUnavailable(Exception):
    """The log cannot be read right now; ``str(exc)`` says why and what to do."""


class LogNotReady(LogUnavailable):
    """The file exists but no engine has created the schema yet (a run is starting)."""


class Event(NamedTuple):
    """One row of the append-only ``event`` table, with ``data`` parsed.

    A ``NamedTuple`` rather than a frozen dataclass: opening a 100k-step run builds 200k of
    these, and a frozen dataclass's ``__init__`` cost 2.6x as much (measured).
    """

    id: int
    run_id: str
    ts: float
    incarnation: int
    kind: str
    seq: int | None
    data: dict[str, Any]


@dataclass(frozen=True)
class StepDetail:
    """What the step and effect tables hold for one step (for the detail pane)."""

    run_id: str
    seq: int
    name: str
    kind: str
    status: str
    phase: str
    decision: str | None
    result: str | None
    error: str | None
    attempts: int
    recoveries: int
    tokens_in: int
    tokens_out: int
    tokens_estimated: bool
    cost_usd: float
    started_at: float
    finished_at: float | None
    incarnation: int
    effects: tuple[dict[str, Any], ...]


class LogRepository:
    """One read-only connection to one log file. Not thread-safe: use it from one thread."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._file_id: tuple[int, int] | None = None

    # -- connection -------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def open(self) -> None:
        """Validate the file (``steplog.db.inspect``) and connect read-only."""
        self.close()
        try:
            if self.path.exists() and inspect(self.path) == 0:
                raise LogNotReady(f"{self.path} is empty: waiting for the first run to create it")
            conn = open_readonly(self.path)
        except LogError as exc:
            raise LogUnavailable(str(exc)) from exc
        self._conn = conn
        self._file_id = identity(self.path)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _c(self) -> sqlite3.Connection:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        return self._conn

    def check_file(self) -> str | None:
        """``None`` while the file we opened is still there; else "deleted" or "replaced"."""
        current = identity(self.path)
        if current is None:
            return "deleted"
        if self._file_id is not None and current != self._file_id:
            return "replaced"
        return None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self._c()
        try:
            return conn.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            problem = self.check_file()
            if problem:
                raise LogUnavailable(f"{self.path} was {problem} while open") from exc
            raise LogUnavailable(f"{self.path} cannot be read ({exc})") from exc

    # -- change detection -------------------------------------------------------------------

    def data_version(self) -> int:
        """``PRAGMA data_version``: changes whenever another connection committed to the file."""
        return int(self._query("PRAGMA data_version")[0][0])

    # -- reads ------------------------------------------------------------------------------

    def events_since(self, bookmark: int, *, limit: int = 5000, run_id: str | None = None) -> list[Event]:
        """Events with ``id > bookmark``, oldest first, at most ``limit`` of them."""
        if run_id is None:
            rows = self._query(
                "SELECT id, run_id, ts, incarnation, kind, seq, data FROM event WHERE id > ? ORDER BY id LIMIT ?",
                (bookmark, limit))
        else:
            rows = self._query(
                "SELECT id, run_id, ts, incarnation, kind, seq, data FROM event WHERE run_id = ? AND id > ?"
                " ORDER BY id LIMIT ?", (run_id, bookmark, limit))
        return [Event(r[0], r[1], r[2], r[3], r[4], r[5], _loads(r[6])) for r in rows]

    def run_row(self, run_id: str) -> dict[str, Any] | None:
        """The run row as a dict (workdir, outbox, params, limits, usage), or ``None``."""
        conn = self._c()
        try:
            cur = conn.execute("SELECT * FROM run WHERE id = ?", (run_id,))
            row = cur.fetchone()
            names = [d[0] for d in cur.description]
        except sqlite3.DatabaseError as exc:
            self.close()
            raise LogUnavailable(f"{self.path} cannot be read ({exc})") from exc
        return dict(zip(names, row)) if row else None

    def step_detail(self, run_id: str, seq: int) -> StepDetail | None:
        rows = self._query(
            "SELECT run_id, seq, name, kind, status, phase, decision, result, error, attempts, recoveries,"
            " tokens_in, tokens_out, tokens_estimated, cost_usd, started_at, finished_at, incarnation"
            " FROM step WHERE run_id = ? AND seq = ?", (run_id, seq))
        if not rows:
            return None
        r = rows[0]
        effects = tuple(
            {"key": e[0], "idx": e[1], "kind": e[2], "target": e[3], "idempotent": bool(e[4]), "status": e[5],
             "attempts": e[6], "response": e[7], "started_at": e[8], "completed_at": e[9]}
            for e in self._query(
                "SELECT key, idx, kind, target, idempotent, status, attempts, response, started_at, completed_at"
                " FROM effect WHERE run_id = ? AND seq = ? ORDER BY idx", (run_id, seq)))
        (rid, seq_, name, kind, status, phase, decision, result, error, attempts, recoveries, tokens_in, tokens_out,
         estimated, cost, started, finished, incarnation) = r
        return StepDetail(rid, seq_, name, kind, status, phase, decision, result, error, attempts, recoveries,
                          tokens_in, tokens_out, bool(estimated), cost, started, finished, incarnation, effects)


def _loads(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"unparsed": text}
    return value if isinstance(value, dict) else {"value": value}


def describe_problem(path: Path) -> str | None:
    """A one-line reason the file cannot be monitored, or ``None`` if it looks like a log."""
    if not path.exists():
        return None
    try:
        inspect(path)
    except LogError as exc:
        return str(exc)
    return None
