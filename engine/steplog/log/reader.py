"""Read-only access to a steplog log, Qt-free: since-bookmark event queries and change checks.

The monitor never writes the log and never holds a read transaction between refreshes: every
query runs in autocommit mode, so SQLite opens and closes a read snapshot around it (an open
reader would stop WAL checkpoints and let the -wal file grow without bound).

A file that is deleted, replaced, foreign or corrupt raises ``LogUnavailable`` with a message
for the window; nothing here ever modifies the file.

The same class reads a log on PostgreSQL (``location`` a ``PgUrl``): what differs is the log's
backend's (``backend.backend_for``). There every transaction is ``READ ONLY``, also in autocommit,
one snapshot per query, and the JSON reads take the backend's forms (``jsonsql``). There is no file
to be deleted or replaced and no ``data_version``: the tailer learns of commits from the log's
notifications (``notifies_commits``; ``steplog.log.pglisten``). A server that goes away raises
``LogUnavailable`` as a damaged file does; messages name the URL without its password.
"""

from __future__ import annotations

import os
import sqlite3
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from steplog.errors import LogError
from steplog.log.backend import Backend, backend_for
from steplog.log.db import has_column, inspect, open_readonly
from steplog.log.events import EventKind
from steplog.log.jsonsql import JsonSql
from steplog.log.ledger import effects_of_step
from steplog.log.location import LogLocation, as_location
from steplog.log.logread import EVENT_COLUMNS, Event, events_since, payload, settled_upto
from steplog.log.openfiles import identity
from steplog.log.steps import StepRecord, step_record

KIND_CODES: tuple[EventKind, ...] = (
    EventKind.STEP_STARTED,
    EventKind.STEP_COMMITTED,
    EventKind.DECISION_RECORDED,
    EventKind.EFFECT_STARTED,
    EventKind.EFFECT_COMPLETED,
    EventKind.STEP_ATTEMPT_FAILED,
    EventKind.LEASE_ACQUIRED,
    EventKind.RUN_FINISHED,
    EventKind.RUN_CREATED,
    EventKind.BUDGET_CHANGED,
    EventKind.LEASE_RELEASED,
    EventKind.WAITING,
    EventKind.CANCEL_REQUESTED,
    EventKind.RETRIED,
    EventKind.STEP_COPIED,
    EventKind.WORKER_CLAIMED,
    EventKind.WORKER_RELEASED,
    EventKind.RESUME_REFUSED,
)
"""The kinds a columnar read codes as small integers: ``KIND_CODES[code - 1]``; 0 is any other
kind."""
NULL_SEQ = -(2**62)
"""``seq`` of an event that has none, in columns (-1 is taken: the timeline's gave-up marker)."""
EVENT_ARRAY = np.dtype(
    [
        ("id", "i8"),
        ("ts", "f8"),
        ("incarnation", "i8"),
        ("code", "i1"),
        ("seq", "i8"),
        ("started", "f8"),
    ]
)
"""``started``: a deferred step start's own time (``journal``), NaN on every other event."""
USAGE_KEYS = ("steps", "tokens", "tokens_estimated", "cost_usd", "seconds")
"""The usage figures the budget charts draw, as the events' ``usage`` objects name them."""
USAGE_COLUMNS = np.dtype([("ts", "f8"), *((key, "f8") for key in USAGE_KEYS)])
_CODE_SQL = (
    "CASE kind "
    + " ".join(f"WHEN '{k.value}' THEN {i + 1}" for i, k in enumerate(KIND_CODES))
    + " ELSE 0 END"
)
_IDS_PER_QUERY = 500
_NAMES_PER_CHUNK = 10_000
_CHUNK = 8192
"""Rows per fetch when a query's rows are read into columns."""
NAME_SEPARATOR = "\x00"
"""Between two names in ``NameColumns.text``: a search for text without it never matches across
two names (offsets come from the lengths, so a name holding one is still read back whole)."""


@dataclass(frozen=True)
class NameColumns:
    """Step names in columns, in event order (the same step may come more than once: the last
    wins): name ``i`` is ``text[start:start + length[i]]``, the names joined by
    ``NAME_SEPARATOR``; its kind ``kinds[kind[i]]``."""

    seq: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int16]
    kinds: tuple[str, ...]
    text: str


class LogUnavailable(Exception):
    """The log cannot be read right now; ``str(exc)`` says why and what to do."""


class LogNotReady(LogUnavailable):
    """The file exists but no engine has created the schema yet (a run is starting)."""


class LogAbsent(LogNotReady):
    """No log file there (none yet, or it was deleted), or an empty one."""


@dataclass(frozen=True)
class RunNow:
    """A run's row as committed at the moment of asking (``LogRepository.run_now``)."""

    status: str
    lease_pid: int | None


@dataclass(frozen=True)
class StepDetail(StepRecord):
    """What the step and effect tables hold for one step (for the detail pane): the step's row
    (``steps.StepRecord``, its fields defined there once) and its effects, in order
    (``ledger.EFFECT_DETAIL`` dicts)."""

    effects: tuple[dict[str, Any], ...] = ()


class LogRepository:
    """One read-only connection to one log (a file or a ``PgUrl``). Not thread-safe: use it
    from one thread."""

    def __init__(self, path: LogLocation) -> None:
        self.path: LogLocation = as_location(path)
        self._backend: Backend = backend_for(self.path)
        self._file: Path | None = self._backend.file_of(self.path)
        self._conn: Any = None
        self._file_id: tuple[int, int] | None = None
        self._json: JsonSql = self._backend.json

    @property
    def notifies_commits(self) -> bool:
        """The log tells of its commits (PostgreSQL's notifications): nothing to poll or watch."""
        return self._backend.notifies_commits

    @property
    def on_postgres(self) -> bool:
        """``notifies_commits``, by the name the monitor knew it by."""
        return self.notifies_commits

    # -- connection -------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def open(self) -> None:
        """Validate the file (``steplog.log.db.inspect``) and connect read-only."""
        self.close()
        try:
            if self._file is not None and _size(self._file) == 0:
                raise LogAbsent(
                    f"{self.path} does not exist: waiting for the first run to create it"
                )
            waiting = self._backend.not_ready(self.path)  # a log no run has made yet
            if waiting is not None:
                raise LogNotReady(waiting)
            conn = open_readonly(self.path)
        except LogError as exc:
            raise LogUnavailable(str(exc)) from exc
        self._conn = conn
        self._file_id = None if self._file is None else identity(self._file)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _c(self) -> Any:
        if self._conn is None:
            self.open()
        assert self._conn is not None
        return self._conn

    def check_file(self) -> str | None:
        """``None`` while the file we opened is still there; else "deleted" or "replaced".
        Always ``None`` on PostgreSQL (a lost server is a query's ``LogUnavailable``)."""
        if self._file is None:
            return None
        current = identity(self._file)
        if current is None:
            return "deleted"
        if self._file_id is not None and current != self._file_id:
            return "replaced"
        return None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self._c()
        try:
            return list(conn.execute(sql, args).fetchall())
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc

    # -- change detection -------------------------------------------------------------------

    def data_version(self) -> int | None:
        """``PRAGMA data_version``: changes whenever another connection committed to the file.
        ``None`` for a log that is no file: it announces its commits instead
        (``steplog.log.follow.notifier``), and each announcement is read."""
        if self._file is None:
            return None
        return int(self._query("PRAGMA data_version")[0][0])

    # -- reads ------------------------------------------------------------------------------

    def events_since(
        self, bookmark: int, *, limit: int = 5000, run_id: str | None = None
    ) -> list[Event]:
        """Events with ``id > bookmark``, oldest first, at most ``limit`` of them
        (``steplog.log.logread``)."""
        conn = self._c()
        try:
            return events_since(conn, bookmark, run_id=run_id, limit=limit)
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc

    # -- columnar reads (opening a run: one pass over its events, no JSON parsed per row) ----

    def max_event_id(self) -> int:
        """The newest event's id (0 for none): the snapshot a bulk load reads up to. On
        PostgreSQL the newest *settled* one (``steplog.log.logread.settled_upto``), so the tail that
        follows the load from here misses nothing that commits late under a lower id."""
        newest = int(self._query("SELECT coalesce(max(id), 0) FROM event")[0][0])
        try:
            upto = settled_upto(self._c())
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc
        return newest if upto is None else min(newest, upto)

    def has_run(self, run_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM run WHERE id = ?", (run_id,)))

    def unfinished_run_ids(self) -> set[str]:
        """The runs not finished (queued, running, waiting): a monitor keeps each of them."""
        from steplog.log.runstatus import ACTIVE

        marks = ", ".join("?" for _ in ACTIVE)
        return {
            r[0]
            for r in self._query(
                f"SELECT id FROM run WHERE status IN ({marks})", tuple(str(s) for s in ACTIVE)
            )
        }

    def run_ids(self, upto: int) -> list[str]:
        """Every run with events up to id ``upto``, in the order of its first event. A prune's
        record (``runs_pruned``, run id ``""``) belongs to no run: it is not listed (it was, as a
        blank "stopped" run, every time a pruned log was opened)."""
        rows = self._query(
            "SELECT run_id FROM event WHERE id <= ? AND run_id != '' GROUP BY run_id ORDER BY "
            "min(id)",
            (upto,),
        )
        return [r[0] for r in rows]

    def event_columns(self, run_id: str, upto: int) -> dict[str, npt.NDArray[Any]]:
        """The run's events up to ``upto`` as ``EVENT_ARRAY``'s fields, one contiguous array
        each, ids ascending (not necessarily dense: pruning may delete rows). The kind is coded
        in SQL (``KIND_CODES``) and the payload is read for one field only, ``started``, of the
        steps' starts and commits that carry it (a deferred start)."""
        j = self._json
        where = " FROM event WHERE run_id = ? AND id <= ?"
        sql = (
            f"SELECT id, ts, incarnation, {_CODE_SQL}, coalesce(seq, {NULL_SEQ}), CASE WHEN kind"
            f" IN (?, ?) AND {j.valid} THEN {j.number('started', 'REAL')} END"
            + where
            + " ORDER BY id"
        )
        kinds = (EventKind.STEP_STARTED.value, EventKind.STEP_COMMITTED.value)
        try:
            rows = int(self._query("SELECT count(*)" + where, (run_id, upto))[0][0])
            cols, n = _read_columns(
                self._c().execute(sql, (*kinds, run_id, upto)), EVENT_ARRAY, rows
            )
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc
        return {name: col[:n] for name, col in cols.items()}

    def events_by_id(self, ids: npt.NDArray[np.int64]) -> list[Event]:
        """The events with these ids (the few whose payload a bulk load needs), ids ascending."""
        out: list[Event] = []
        wanted = [int(i) for i in ids]
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            chunk = wanted[start : start + _IDS_PER_QUERY]
            rows = self._query(
                f"SELECT {EVENT_COLUMNS} FROM event WHERE id IN ({','.join('?' * len(chunk))}) "
                f"ORDER BY id",
                tuple(chunk),
            )
            out.extend(Event.from_row(r) for r in rows)
        return out

    def decision_tokens(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
        """(id, tokens in + out, estimated) of these ``decision_recorded`` events, ids ascending."""
        dtype = np.dtype([("id", "i8"), ("tokens", "i8"), ("estimated", "?")])
        parts = []
        wanted = [int(i) for i in ids]
        j = self._json
        for start in range(0, len(wanted), _IDS_PER_QUERY):
            chunk = wanted[start : start + _IDS_PER_QUERY]
            rows = self._query(
                f"SELECT id, CASE WHEN {j.valid} THEN coalesce({j.number('tokens_in', 'INTEGER')}, "
                f"0) + coalesce({j.number('tokens_out', 'INTEGER')}, 0) ELSE 0 END, CASE WHEN "
                f"{j.valid} THEN coalesce({j.number('estimated', 'INTEGER')}, 0) != 0 "
                "ELSE false END"
                f" FROM event WHERE id IN ({','.join('?' * len(chunk))}) ORDER BY id",
                tuple(chunk),
            )
            parts.append(np.array(rows, dtype=dtype) if rows else np.zeros(0, dtype))
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    def last_usage(self, run_id: str, upto: int) -> dict[str, Any] | None:
        """The usage object of the run's newest event that carries one (up to ``upto``)."""
        j = self._json
        rows = self._query(
            f"SELECT {j.object_text('usage')} FROM event WHERE run_id = ? AND id <= ? AND "
            f"{j.valid} AND {j.is_object('usage')} ORDER BY id DESC LIMIT 1",
            (run_id, upto),
        )
        return payload(rows[0][0]) if rows else None

    def usage_columns(self, run_id: str, upto: int) -> npt.NDArray[Any]:
        """The budget charts' points (``USAGE_COLUMNS``): every event up to ``upto`` that carries
        usage, but a step's start (it repeats the last commit's usage), ids ascending. Filled in
        chunks into an array sized by a count of the run's events (an upper bound), with no
        copy: the rows past the points are room for the live ones."""
        j = self._json
        fields = ", ".join(f"coalesce({j.number(f'usage.{f}', 'REAL')}, 0)" for f in USAGE_KEYS)
        where = " FROM event WHERE run_id = ? AND id <= ? AND kind != ?"
        sql = (
            f"SELECT ts, {fields}"
            + where
            + f" AND {j.valid} AND {j.is_object('usage')} ORDER BY id"
        )
        args = (run_id, upto, EventKind.STEP_STARTED.value)
        try:
            bound = int(self._query("SELECT count(*)" + where, args)[0][0])
            buffer = np.zeros(bound, dtype=USAGE_COLUMNS)
            n = 0
            cur = self._c().execute(sql, args)
            while chunk := cur.fetchmany(_CHUNK):
                if n + len(chunk) > len(buffer):  # more than counted: a writer got in between
                    buffer = np.concatenate([buffer, np.zeros(len(chunk), USAGE_COLUMNS)])
                buffer[n : n + len(chunk)] = chunk
                n += len(chunk)
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc
        return buffer[:n]

    def step_names(self, run_id: str, upto: int) -> NameColumns:
        """The names and kinds the run's ``step_started`` events (a fork's ``step_copied``, and
        the ``step_committed`` of a step whose start it is) up to ``upto`` give their steps, in
        event order (a later one for the same step wins: ``NameColumns``).

        Read row by row into one string and three arrays, never a Python object per step kept:
        a million steps' names as a dict of tuples were 230 MB of the monitor's memory; as
        columns they are about 35 MB."""
        j = self._json
        sql = (
            f"SELECT seq, coalesce({j.text('name')}, ''), coalesce({j.text('kind')}, '')"
            " FROM event WHERE run_id = ? AND id <= ? AND kind IN (?, ?, ?) AND seq IS NOT NULL"
            f" AND {j.valid} AND (kind != ? OR {j.text('name')} IS NOT NULL)"
            " ORDER BY id"
        )
        committed = EventKind.STEP_COMMITTED.value
        seqs, lengths, codes = array("q"), array("q"), array("h")
        kinds: dict[str, int] = {}
        chunks: list[str] = []
        names: list[str] = []
        try:
            for seq, name, kind in self._c().execute(
                sql,
                (
                    run_id,
                    upto,
                    EventKind.STEP_STARTED.value,
                    EventKind.STEP_COPIED.value,
                    committed,
                    committed,
                ),
            ):
                name = str(name)
                seqs.append(seq)
                lengths.append(len(name))
                codes.append(kinds.setdefault(str(kind), len(kinds)))
                names.append(name)
                if len(names) == _NAMES_PER_CHUNK:
                    chunks.append(NAME_SEPARATOR.join(names))
                    names = []
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc
        if names:
            chunks.append(NAME_SEPARATOR.join(names))
        return NameColumns(
            seq=np.frombuffer(seqs, dtype=np.int64) if seqs else np.zeros(0, np.int64),
            length=np.frombuffer(lengths, dtype=np.int64) if lengths else np.zeros(0, np.int64),
            kind=np.frombuffer(codes, dtype=np.int16) if codes else np.zeros(0, np.int16),
            kinds=tuple(kinds),
            text=NAME_SEPARATOR.join(chunks),
        )

    def _unavailable(self, exc: sqlite3.DatabaseError) -> LogUnavailable:
        self.close()
        problem = self.check_file()
        if problem:
            return LogUnavailable(f"{self.path} was {problem} while open")
        return LogUnavailable(f"{self.path} cannot be read ({exc})")

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
        return dict(zip(names, row, strict=True)) if row else None

    def run_now(self, run_id: str) -> RunNow | None:
        """The run's status and lease holder as committed right now (``None`` if there is no such
        run): fresher than the tail, which may be a poll behind."""
        rows = self._query("SELECT status, lease_pid FROM run WHERE id = ?", (run_id,))
        if not rows:
            return None
        status, pid = rows[0]
        return RunNow(str(status), int(pid) if pid is not None else None)

    def step_detail(self, run_id: str, seq: int) -> StepDetail | None:
        """The step's row and its ledger rows (``steps.step_record``,
        ``ledger.effects_of_step``)."""
        conn = self._c()
        try:
            record = step_record(conn, run_id, seq)
            if record is None:
                return None
            effects = tuple(effects_of_step(conn, run_id, seq))
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc
        return StepDetail(**vars(record), effects=effects)

    def step_stream(self, run_id: str, seq: int | None) -> tuple[int | None, list[Any]]:
        """The stream entries of step ``seq`` of the run, every attempt, settled or not
        (``streams.read_step``); ``seq`` ``None``: the step that wrote last. ``(None, [])`` for
        a log older than streams."""
        from steplog.log.streams import read_step

        conn = self._c()
        try:
            if not has_column(conn, "stream", "pos"):
                return None, []
            return read_step(conn, run_id, seq)
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc

    def stream_progress(self, run_id: str, after: int = -1) -> tuple[int, list[Any]]:
        """When each step attempt's stream entries after offset ``after`` came
        (``streams.read_progress``) and the last offset read; ``(after, [])`` for a log older
        than streams."""
        from steplog.log.streams import read_progress

        conn = self._c()
        try:
            if not has_column(conn, "stream", "pos"):
                return after, []
            return read_progress(conn, run_id, after)
        except sqlite3.DatabaseError as exc:
            raise self._unavailable(exc) from exc


def _read_columns(
    cursor: Any, dtype: np.dtype[Any], rows: int
) -> tuple[dict[str, npt.NDArray[Any]], int]:
    """A query's rows into one contiguous array per field of ``dtype``, sized for ``rows`` (a
    count made just before; grown if more came), a chunk at a time: no structured copy of the
    whole result beside the columns (a 1M-event run's 41 MB), no list of its tuples."""
    names = dtype.names or ()
    cols = {name: np.empty(rows, dtype=dtype[name]) for name in names}
    n = 0
    while chunk := cursor.fetchmany(_CHUNK):
        part = np.array(chunk, dtype=dtype)
        if n + len(part) > len(cols[names[0]]):
            for name in names:
                cols[name] = np.concatenate([cols[name][:n], np.empty(len(part), dtype[name])])
        for name in names:
            cols[name][n : n + len(part)] = part[name]
        n += len(part)
    return cols, n


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def describe_problem(path: Path) -> str | None:
    """A one-line reason the file cannot be monitored, or ``None`` if it looks like a log."""
    if not path.exists():
        return None
    try:
        inspect(path)
    except LogError as exc:
        return str(exc)
    return None
