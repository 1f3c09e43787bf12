"""A run's streams: what its steps emit as they go (``run.emit``, a model's tokens), appended off
the steps' commit path and read back in order, each entry with whether its attempt was cut.

Writing. Entries appended by step bodies (any thread) wait in a ``StreamBuffer``; a thread of its
own writes them in batches (every ``interval`` seconds, or sooner when ``batch`` are waiting), each
batch one fenced transaction at ``synchronous = NORMAL`` on its own connection: a kill cannot lose
a committed batch, and a step's checkpoint never waits for an fsync of tokens. Every transaction of
the engine's own (``Journal._tx``) writes what is still waiting first, so a step's entries are in
the log by the time its checkpoint is, and the terminal record comes after every entry.

Offsets (``pos``) are assigned inside the writing transaction (the log's largest + 1), under the
write lock that the fence takes (SQLite's one writer; PostgreSQL's lock on the run row): they
increase strictly in commit order, so a reader that has seen offset n never later finds a smaller
one. An entry's step start is in the log before the entry (a deferred start is written first):
a redone attempt then always has a number of its own.

Reading. Whether an attempt was cut short is never written (a kill writes nothing); it is read from
the step's row: an entry is *settled* once its attempt is over, and then *cut* unless that attempt
is the one the step recorded. ``read_entries`` returns settled entries only, in offset order, and
stops at the first unsettled one: what it returned is final, and reading on from the next offset
later returns exactly what a reader starting after the run would (``steplog stream --follow``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from steplog.errors import UsageError
from steplog.log.connection import LogConnection, LogFailure
from steplog.log.db import RUN_WRITE, rollback
from steplog.log.runstatus import TERMINAL

if TYPE_CHECKING:
    from steplog.log.follow import Announcements
    from steplog.log.location import LogLocation


class RunWriter(Protocol):
    """What the buffer needs of the engine's ``Journal`` (which holds the buffer): whose run,
    which incarnation, the fence flag, and the writing of a deferred step start."""

    run_id: str
    incarnation: int
    fenced: threading.Event

    def record_late_start(self, conn: LogConnection, *, after: float = ...) -> None: ...


STREAM_NAME_MAX = 64
TOKENS = "tokens"
"""The stream a model's answer is written to as it comes."""

_INSERT_SQL = (
    "INSERT INTO stream (run_id, pos, name, seq, attempt, incarnation, ts, value) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_NEXT_SQL = "SELECT COALESCE(MAX(pos), -1) + 1 FROM stream WHERE run_id = ?"


@dataclass(frozen=True)
class Pending:
    """An entry appended and not yet written."""

    name: str
    value: str  # JSON
    seq: int | None
    attempt: int | None
    ts: float


class _Text:
    """Pieces of text of one step attempt appended one after another while a batch gathers: one
    entry, their text joined, JSON-encoded once when taken (a model's answer in ~50 ms slices,
    not a row and an encoding per chunk)."""

    __slots__ = ("attempt", "name", "parts", "seq", "ts")

    def __init__(self, name: str, seq: int | None, attempt: int | None, ts: float, text: str):
        self.name, self.seq, self.attempt, self.ts = name, seq, attempt, ts
        self.parts = [text]

    def pending(self) -> Pending:
        text = "".join(self.parts)
        return Pending(
            self.name, json.dumps(text, ensure_ascii=False), self.seq, self.attempt, self.ts
        )


def insert(conn: LogConnection, run_id: str, incarnation: int, entries: Sequence[Pending]) -> None:
    """Write ``entries`` in the caller's write transaction (fenced already), numbered on from the
    run's last offset."""
    if not entries:
        return
    pos = int(conn.execute(_NEXT_SQL, (run_id,)).fetchone()[0])
    for i, e in enumerate(entries):
        conn.execute(
            _INSERT_SQL, (run_id, pos + i, e.name, e.seq, e.attempt, incarnation, e.ts, e.value)
        )


class StreamBuffer:
    """Entries waiting to be written, and the thread that writes them (started by the first
    entry: a run that streams nothing has no thread and pays nothing)."""

    def __init__(
        self,
        journal: RunWriter,
        connect: Callable[[], LogConnection],
        *,
        interval: float = 0.05,
        batch: int = 256,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._journal, self._connect = journal, connect
        self._interval, self._batch, self._clock = interval, batch, clock
        self._waiting: list[Pending | _Text] = []
        self._cond = threading.Condition()
        self.busy = threading.Lock()
        """Held while a batch is written (by the thread, or by the engine's own transaction that
        takes the waiting entries): batches commit in the order they were taken, so offsets
        follow the order entries were appended. Taken before the journal's ``_deferred_lock``."""
        self._thread: threading.Thread | None = None
        self._closing = False
        self.lost = 0
        """Entries dropped because the run was taken over (fenced) or the log would not take
        them; the step's checkpoint does not depend on them."""

    @property
    def active(self) -> bool:
        return self._thread is not None

    def append(self, name: str, value: str, seq: int | None, attempt: int | None) -> None:
        """Queue one entry (``value``: JSON); thread-safe, never blocks on the log."""
        entry = Pending(name, value, seq, attempt, self._clock())
        with self._cond:
            self._queue(entry)

    def append_text(self, name: str, text: str, seq: int | None, attempt: int | None) -> None:
        """Queue a piece of text (a model's answer): joined to the entry waiting last when that
        is text of the same stream and step attempt, else an entry of its own. Thread-safe."""
        with self._cond:
            last = self._waiting[-1] if self._waiting else None
            if (
                type(last) is _Text
                and last.seq == seq
                and last.attempt == attempt
                and last.name == name
                and not self._closing
            ):
                last.parts.append(text)
                return
            self._queue(_Text(name, seq, attempt, self._clock(), text))

    def _queue(self, entry: Pending | _Text) -> None:
        """``entry`` waiting, the writing thread started or woken as needed (holding ``_cond``)."""
        if self._closing:
            raise RuntimeError("the run's stream is closed: the run has ended")
        self._waiting.append(entry)
        if self._thread is None:
            # Started before it is kept: ``close`` never joins a thread that never started
            # (a stop may land on any line; one landing between leaves a thread that ends
            # with ``close`` like the kept one).
            thread = threading.Thread(target=self._run, name="steplog-stream", daemon=True)
            thread.start()
            self._thread = thread
        elif len(self._waiting) >= self._batch:
            self._cond.notify()

    def take(self) -> list[Pending]:
        """Every entry waiting, for the caller (holding ``busy``) to write, or ``put_back``."""
        with self._cond:
            taken, self._waiting = self._waiting, []
        return [e.pending() if isinstance(e, _Text) else e for e in taken]

    def put_back(self, entries: list[Pending]) -> None:
        """Entries taken by a transaction that rolled back: written with the next one."""
        with self._cond:
            self._waiting[:0] = entries

    def close(self, *, timeout: float = 5.0) -> None:
        """Write what is waiting and stop the thread (the engine is done with the run)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        conn: LogConnection | None = None
        try:
            while True:
                with self._cond:
                    if not self._closing:  # a batch gathers for an interval
                        self._cond.wait(self._interval)
                    if not self._waiting and self._closing:
                        return
                if not self._waiting:
                    continue
                with self.busy:
                    entries = self.take()
                    if not entries:
                        continue
                    try:
                        if conn is None:
                            conn = self._connect()
                        if not self._write(conn, entries):
                            return
                    except Exception:  # a lost server, a full disk: the entries wait, and
                        self.put_back(entries)  # go with the next batch or the engine's write
                        if conn is not None:
                            _close_quietly(conn)
                            conn = None
        finally:
            if conn is not None:
                _close_quietly(conn)

    def _write(self, conn: LogConnection, entries: list[Pending]) -> bool:
        """One batch in one fenced transaction; False once the run is no longer this engine's."""
        j = self._journal
        if j.fenced.is_set():
            self.lost += len(entries)
            return False
        j.record_late_start(conn, after=0.0)  # a deferred start goes first: see the module
        try:
            conn.execute(RUN_WRITE)
            mine = conn.execute(
                "UPDATE run SET updated_at = ? WHERE id = ? AND incarnation = ? RETURNING id",
                (self._clock(), j.run_id, j.incarnation),
            ).fetchall()
            if not mine:
                rollback(conn)
                j.fenced.set()
                self.lost += len(entries)
                return False
            insert(conn, j.run_id, j.incarnation, entries)
            conn.execute("COMMIT")
        except LogFailure:
            rollback(conn)
            raise
        return True


def copy_for_fork(conn: LogConnection, parent: str, child: str, at_step: int) -> None:
    """A fork's stream starts as its parent's up to ``at_step``: the entries of the steps it
    copies, each step's recorded attempt only (a fork carries the answers on, not what was cut),
    numbered from 0 in their order. In the caller's transaction."""
    conn.execute(
        "INSERT INTO stream (run_id, pos, name, seq, attempt, incarnation, ts, value) "
        "SELECT ?, ROW_NUMBER() OVER (ORDER BY s.pos) - 1, s.name, s.seq, s.attempt, 0, s.ts, "
        "s.value FROM stream s JOIN step st ON st.run_id = s.run_id AND st.seq = s.seq "
        "WHERE s.run_id = ? AND s.seq < ? AND st.status = 'committed' AND st.attempts = s.attempt",
        (child, parent, at_step),
    )


def _close_quietly(conn: LogConnection) -> None:
    try:
        conn.close()
    except Exception:  # already broken: nothing to give back
        pass


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One settled entry, as ``steplog stream --json`` prints it."""

    offset: int
    stream: str
    step: int | None
    attempt: int | None
    cut: bool
    value: Any
    ts: float

    def as_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "stream": self.stream,
            "step": self.step,
            "attempt": self.attempt,
            "cut": self.cut,
            "value": self.value,
        }


_ENTRIES = (
    "SELECT s.pos, s.name, s.seq, s.attempt, s.incarnation, s.ts, s.value, st.status, st.attempts "
    "FROM stream s LEFT JOIN step st ON st.run_id = s.run_id AND st.seq = s.seq "
)
"""An entry with what ``settle`` needs of its step; ``_READ_SQL`` and ``_STEP_SQL`` pick them."""
_READ_SQL = _ENTRIES + "WHERE s.run_id = ? AND s.pos >= ? ORDER BY s.pos LIMIT ?"
_STEP_SQL = _ENTRIES + "WHERE s.run_id = ? AND s.seq = ? ORDER BY s.pos"


def settle(row: Sequence[Any], run_status: str, run_incarnation: int) -> tuple[bool, bool]:
    """(settled, cut) of one entry read with its step's status and attempts (``_READ_SQL``)."""
    _pos, _name, seq, attempt, incarnation, _ts, _value, status, attempts = row
    if seq is None:
        return True, False  # written by no step attempt: nothing can cut it
    if status == "committed":
        return True, attempt != attempts
    if attempts is not None and attempts > attempt:
        return True, True  # a later attempt began: this one is over, and not the answer
    if status == "failed":
        return True, True  # the step failed for good: nothing was recorded
    # Its attempt is the step's latest and has not ended in the log: over only if the engine that
    # wrote it is gone (a newer engine has the run) or the run ended without it.
    if run_incarnation > incarnation or run_status in TERMINAL:
        return True, True
    return False, False


def _run_now(conn: LogConnection, run_id: str) -> tuple[str, int] | None:
    """The run's status and incarnation as committed now (what ``settle`` judges by)."""
    run = conn.execute("SELECT status, incarnation FROM run WHERE id = ?", (run_id,)).fetchone()
    return None if run is None else (str(run[0]), int(run[1]))


def _entry(row: Sequence[Any], cut: bool) -> Entry:
    """An ``Entry`` of a row read by ``_READ_SQL``'s columns."""
    return Entry(int(row[0]), row[1], row[2], row[3], cut, json.loads(row[6]), float(row[5]))


def read_entries(
    conn: LogConnection,
    run_id: str,
    *,
    from_offset: int = 0,
    names: Iterable[str] | None = None,
    limit: int = 1000,
) -> tuple[list[Entry], int, bool]:
    """Settled entries from ``from_offset`` on (those of ``names`` only, if given), the offset to
    read from next time, and whether the stream is complete (the run is over and every entry up
    to the last was returned). Stops at the first unsettled entry, whatever its stream."""
    run = _run_now(conn, run_id)
    if run is None:
        return [], from_offset, True
    run_status, run_incarnation = run
    wanted = None if names is None else frozenset(names)
    rows = conn.execute(_READ_SQL, (run_id, from_offset, limit)).fetchall()
    out: list[Entry] = []
    next_offset = from_offset
    for row in rows:
        settled, cut = settle(row, run_status, run_incarnation)
        if not settled:
            return out, next_offset, False
        next_offset = int(row[0]) + 1
        if wanted is None or row[1] in wanted:
            out.append(_entry(row, cut))
    complete = run_status in TERMINAL and len(rows) < limit
    return out, next_offset, complete


def read_step(
    conn: LogConnection, run_id: str, seq: int | None
) -> tuple[int | None, list[tuple[Entry, bool]]]:
    """Step ``seq``'s entries, every attempt, with whether each is settled (the monitor's output
    pane shows an attempt's text as it comes); ``seq`` ``None``: the step that wrote last."""
    if seq is None:
        row = conn.execute(
            "SELECT seq FROM stream WHERE run_id = ? AND seq IS NOT NULL ORDER BY pos DESC LIMIT 1",
            (run_id,),
        ).fetchone()
        if row is None:
            return None, []
        seq = int(row[0])
    run = _run_now(conn, run_id)
    if run is None:
        return seq, []
    rows = conn.execute(_STEP_SQL, (run_id, seq)).fetchall()
    out = []
    for r in rows:
        settled, cut = settle(r, *run)
        out.append((_entry(r, cut), settled))
    return seq, out


_PROGRESS_SQL = (
    "SELECT seq, incarnation, attempt, MIN(ts), MAX(ts), MAX(pos) FROM stream "
    "WHERE run_id = ? AND pos > ? AND seq IS NOT NULL GROUP BY seq, incarnation, attempt"
)


@dataclass(frozen=True)
class Progress:
    """When one step attempt's entries came: the first and the latest (engine clock)."""

    seq: int
    incarnation: int
    attempt: int
    first: float
    last: float


def read_progress(conn: LogConnection, run_id: str, after: int = -1) -> tuple[int, list[Progress]]:
    """Per step attempt, when the entries after offset ``after`` came, and the last offset read
    (the next call's ``after``): the monitor's timeline fills a running model call's bar from
    this without reading the text. One indexed range of the run's newest entries."""
    rows = conn.execute(_PROGRESS_SQL, (run_id, after)).fetchall()
    last = max((int(r[5]) for r in rows), default=after)
    return last, [
        Progress(int(r[0]), int(r[1]), int(r[2] or 0), float(r[3]), float(r[4])) for r in rows
    ]


def entries(
    location: LogLocation,
    run_id: str,
    *,
    names: Iterable[str] | None = None,
    from_offset: int = 0,
    follow: bool = False,
    poll: float = 0.05,
) -> Iterator[Entry]:
    """The settled entries of ``run_id`` from ``from_offset`` on, in offset order.

    ``follow``: keep reading as entries settle, across engines killed and started again, until
    the run is over and every entry is out. On PostgreSQL a follower wakes on the log's
    notifications; on a file it polls ``PRAGMA data_version`` every ``poll`` seconds (one page
    read, no query). ``UnknownRun`` if the log has no such run."""
    from steplog.errors import UnknownRun
    from steplog.log.db import has_column, open_readonly
    from steplog.log.follow import notifier

    if from_offset < 0:
        raise UsageError(f"an offset is a whole number >= 0 (got {from_offset})")
    conn = _await_run(location, run_id) if follow else open_readonly(location)
    hear = notifier(location).announcements if follow else None
    try:
        if conn.execute("SELECT 1 FROM run WHERE id = ?", (run_id,)).fetchone() is None:
            raise UnknownRun(f"no run {run_id!r} in {location}; `steplog runs` lists the runs")
        if not has_column(conn, "stream", "pos"):
            return  # a log no engine of schema 7 or later has written to: no streams yet
        if hear is not None:
            hear.connect()  # before the first read: nothing committed after it goes unheard
        offset = from_offset
        while True:
            before = offset
            found, offset, complete = read_entries(
                conn, run_id, from_offset=offset, names=names, limit=1000
            )
            yield from found
            if complete:
                return
            if offset != before:
                continue  # maybe more settled behind a full page
            if not follow:
                return
            _wait(conn, hear, poll)
    finally:
        if hear is not None:
            hear.close()
        conn.close()


def _await_run(location: LogLocation, run_id: str) -> LogConnection:
    """A reader's connection once the log and the run are there: a follower may start before the
    run, even before the log (each looked for every 100 ms)."""
    from steplog.log.db import open_follower

    while True:
        conn = open_follower(location)
        if conn is not None:
            try:
                if conn.execute("SELECT 1 FROM run WHERE id = ?", (run_id,)).fetchone():
                    return conn
            except LogFailure:
                pass  # the engine is making the log's schema
            conn.close()
        time.sleep(0.1)


def _wait(conn: LogConnection, hear: Announcements | None, poll: float) -> None:
    """Until something may have been committed (at most a second: a lost notification, a
    ``data_version`` that changed for another run's commit, cost one more read)."""
    if hear is not None:
        if not hear.connected:
            hear.connect()
        hear.wait(1.0)
        return
    deadline = time.monotonic() + 1.0
    before = conn.execute("PRAGMA data_version").fetchone()[0]
    while time.monotonic() < deadline:
        time.sleep(poll)
        if conn.execute("PRAGMA data_version").fetchone()[0] != before:
            return
