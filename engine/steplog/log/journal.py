"""The engine's write side of the log: every state change of one run, fenced and evented.

Each public method is one write transaction (``db.RUN_WRITE``) that (1) proves this engine still
holds
the run (``UPDATE run ... WHERE incarnation = mine``; zero rows means a newer incarnation took
over, and the transaction is rolled back and ``Fenced`` raised), (2) changes the checkpoint rows,
and (3) appends the matching ``event`` row. A reader tailing ``event`` therefore sees every change.

A plain step is **one transaction**: its start is not written when it begins but deferred
(``begin_attempt(defer=True)``) and written with the step's next write, in that write's
transaction; a step that commits first is one ``step`` row inserted committed and one
``step_committed`` event that says it began (``started``). A deferred start is written on its own
only when the step outlasts ``LATE_START_SECONDS`` (the heartbeat's ``record_late_start``), so
the monitor shows a long step running and a poison pill is counted. What is given up: a kill
inside a short step leaves no trace of its start, so the next engine cannot tell a kill inside it
from one just before it; the readers count such a kill as one step redone (an upper bound), and
the poison-pill rule counts the engines that died with no progress (``deaths_since_progress``).

Raw ``sqlite3`` on purpose: this is the hot path (one commit per no-op step).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from steplog.errors import Fenced, LogWriteError, first_line
from steplog.log import interrupts
from steplog.log.db import RUN_WRITE, RUN_WRITE_BATCHED, LogConnection, rollback
from steplog.log.events import EventKind, StepCommitted, StepStarted, Waiting
from steplog.log.lease import boot_clock

if TYPE_CHECKING:
    from steplog.log.observer import RunObserver
    from steplog.log.streams import Pending, StreamBuffer

Clock = Callable[[], float]

LATE_START_SECONDS = 0.5
"""A deferred step start still unwritten after this long is written by the heartbeat on its own:
the monitor then shows the step running (and the verdict knows where a kill landed)."""


@dataclass
class _Start:
    """A step attempt begun whose start is not in the log yet (a deferred start)."""

    seq: int
    name: str
    kind: str
    attempt: int
    recoveries: int
    at: float
    """When it began (the journal's clock)."""
    t0: float
    """When it began (the monotonic clock): the heartbeat's "is it late" test."""
    executions: int = 1
    """What it counts as in ``Usage.executions`` (kept counted if a write fails meanwhile)."""
    written: bool = False
    """Its start is in the log (written late, by the heartbeat): the commit updates the row."""


# Every write transaction's first statement: the fence (zero rows: a newer engine has the run),
# the budget use so far, and whether a cancel was asked for. One constant string: the statement
# cache then parses it once.
_FENCE_SQL = (
    "UPDATE run SET updated_at = ?, lease_expires = ?, lease_expires_boot = ?, used_seconds = ?, "
    "used_steps = ?, used_tokens = ?, tokens_estimated = ?, reserved_tokens = ?, used_cost_usd = "
    "?, reserved_cost_usd = ?, used_retries = ?, step_executions = ? WHERE id = ? AND incarnation "
    "= ? RETURNING cancel_requested"
)


def dumps(value: Any) -> str:
    """The log's one JSON encoder. Strict JSON only: NaN and Infinity raise ``ValueError`` (like a
    value of no JSON type raises ``TypeError``), since no other JSON reader accepts them and every
    ``--json`` output and the monitor read back what is stored here."""
    return json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, allow_nan=False
    )


def why_not_json(exc: Exception) -> str:
    """Why ``dumps`` refused a value (``TypeError``, ``ValueError`` or ``RecursionError``), for a
    message."""
    if isinstance(exc, RecursionError):
        return "it is nested too deeply"
    if isinstance(exc, ValueError):
        return "it holds NaN or Infinity, which JSON cannot carry"
    return f"{exc}"


_STARTED_SQL = (
    "INSERT INTO step (run_id, seq, name, kind, status, phase, attempts, recoveries, started_at, "
    "incarnation, args_hash) VALUES (?, ?, ?, ?, 'running', 'started', ?, ?, ?, ?, ?)"
)
"""A step's row as an attempt of it starts (its start written, deferred or not)."""

_COMMITTED_SQL = (
    "INSERT INTO step (run_id, seq, name, kind, status, phase, result, attempts, recoveries, "
    "started_at, finished_at, incarnation, args_hash) VALUES "
    "(?, ?, ?, ?, 'committed', 'recorded', ?, ?, ?, ?, ?, ?, ?)"
)
"""A step whose start was deferred and never written: inserted committed, in one row."""

_PUBLISH_SQL = (
    "INSERT INTO run_event (run_id, key, value, seq, set_at) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, seq = excluded.seq, "
    "set_at = excluded.set_at"
)
"""A run's event set by a step (``run.set_event``): the latest value wins."""

_EVENT_SQL = (
    "INSERT INTO event (run_id, ts, incarnation, kind, seq, data) VALUES (?, ?, ?, ?, ?, ?)"
)


def append_event(
    conn: LogConnection,
    run_id: str,
    incarnation: int,
    kind: str,
    data: Mapping[str, Any],
    *,
    seq: int | None = None,
    ts: float,
) -> None:
    """Append one event to the log, inside the caller's write transaction: the one place an
    ``event`` row is written. Every state change writes its event in the same transaction (the
    engine's ``Journal``, a claim, run control, the queue, prune), so a reader tailing ``event``
    sees every change. ``data`` is the kind's payload (``events.PAYLOADS``); ``seq`` the step it
    concerns (``None``: the run's); ``run_id`` ``""`` for an event of no run (``runs_pruned``)."""
    conn.execute(_EVENT_SQL, (run_id, ts, incarnation, kind, seq, dumps(data)))


@dataclass
class Usage:
    """Budget use as the run row holds it; ``seconds_base`` is what earlier incarnations used."""

    steps: int = 0
    tokens: int = 0
    tokens_estimated: int = 0
    reserved_tokens: int = 0
    cost_usd: float = 0.0
    reserved_cost_usd: float = 0.0
    retries: int = 0
    executions: int = 0
    seconds_base: float = 0.0

    def snapshot(self, seconds: float, *, compact: bool = False) -> dict[str, Any]:
        """The usage an event carries. ``compact`` (the per-step events, two per step) leaves out
        the counters that are still zero: a reader takes a missing counter as 0, and a no-op step's
        events are then about half as big."""
        full = {
            "steps": self.steps,
            "tokens": self.tokens + self.reserved_tokens,
            "tokens_estimated": self.tokens_estimated,
            "cost_usd": round(self.cost_usd + self.reserved_cost_usd, 9),
            "seconds": round(seconds, 3),
            "retries": self.retries,
            "executions": self.executions,
        }
        return {k: v for k, v in full.items() if v} if compact else full


class Journal:
    """Writes for one run by one incarnation. Not thread-safe: the engine's main thread only."""

    def __init__(
        self,
        conn: LogConnection,
        run_id: str,
        incarnation: int,
        usage: Usage,
        *,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
        lease_seconds: float,
        synchronous: str = "FULL",
        observer: RunObserver | None = None,
    ) -> None:
        self.conn = conn
        self.observer = observer
        """Told of each change once it is committed (tracing); ``None`` costs one test per write."""
        self.run_id = run_id
        self.incarnation = incarnation
        self.usage = usage
        self._committed = dict(vars(usage))
        """``usage``'s fields as the log holds them: restored when a write fails (see ``_tx``)."""
        self._clock = clock
        self._monotonic = monotonic
        self._t0 = monotonic()
        self._lease_seconds = lease_seconds
        # Step-start markers are committed without fsync (synchronous=NORMAL for that one
        # transaction): a kill cannot lose them, and the record commit that follows fsyncs the
        # WAL, markers included. Only a power cut between the two could drop an attempt counter.
        self._base_sync = synchronous
        self._sync = synchronous
        self.fenced = threading.Event()
        self.cancel_requested: str | None = None
        """Set when someone asked to cancel the run (seen at each write and by the heartbeat);
        the runtime ends the run ``cancelled`` at the next step boundary."""
        self._paused_at: float | None = None
        self._deferred: _Start | None = None
        """The step begun whose start is not written yet (at most one: see ``begin_attempt``)."""
        self._deferred_lock = threading.Lock()
        """Held by a transaction that may write the deferred start, and by the heartbeat writing
        it late: the start is written once, by one of them."""
        self._open: set[int] = set()
        """Steps whose start is written and that have not committed or failed for good."""
        self.finishing = threading.Event()
        """Set once the terminal record is being written: nothing may stop the run any more."""
        self.streams: StreamBuffer | None = None
        """The run's stream entries waiting to be written (``steplog.log.streams``); every
        transaction here writes them first. Set by the engine."""
        self.hashes: dict[int, str] = {}
        """Each new step's ``args_hash`` by number, set by the runtime as it numbers the step
        (``Run._enter``) and written with the step's row."""

    # -- plumbing ---------------------------------------------------------------------------

    def seconds_used(self) -> float:
        """Active seconds: time spent waiting for a signal does not count against the budget."""
        now = self._paused_at if self._paused_at is not None else self._monotonic()
        return self.usage.seconds_base + (now - self._t0)

    def pause_clock(self) -> None:
        if self._paused_at is None:
            self._paused_at = self._monotonic()

    def resume_clock(self) -> None:
        if self._paused_at is not None:
            self._t0 += self._monotonic() - self._paused_at
            self._paused_at = None

    def _set_sync(self, level: str) -> None:
        if level != self._sync:
            self.conn.execute(f"PRAGMA synchronous = {level}")
            self._sync = level

    @contextmanager
    def _tx(
        self,
        *,
        durable: bool = True,
        run_sets: str = "",
        run_args: tuple[Any, ...] = (),
        settles: _Start | None = None,
    ) -> Iterator[LogConnection]:
        """One fenced write transaction; ``run_sets`` adds assignments to the run-row update.

        A deferred step start not yet in the log is written first, in this transaction (the log
        never holds a later fact of a run without the start before it), except ``settles``: the
        start the caller writes itself (a step committed with its start in one row), forgotten
        once this commits. One generator, not three nested context managers: this runs once per
        step."""
        if self.fenced.is_set():
            raise Fenced(
                f"run {self.run_id}: a newer engine took it over; this one (incarnation "
                f"{self.incarnation}) stops"
            )
        # Stream entries still queued are written first, one writer of them at a time (their
        # batches then commit in the order they were taken): see ``StreamBuffer.busy``.
        streams = self.streams if self.streams is not None and self.streams.active else None
        # The heartbeat must not write the deferred start meanwhile (``record_late_start``).
        lock = self._deferred_lock if self._deferred is not None else None
        # Taken inside a critical section: a stop landing between taking a lock and the ``try``
        # that lets it go would leave it held for good (test_stop_signals walks every line).
        with interrupts.critical():
            if streams is not None:
                streams.busy.acquire()
            if lock is not None:
                lock.acquire()
            try:
                yield from self._tx_body(durable, run_sets, run_args, settles, streams)
            finally:
                if lock is not None:
                    lock.release()
                if streams is not None:
                    streams.busy.release()

    def _tx_body(
        self,
        durable: bool,
        run_sets: str,
        run_args: tuple[Any, ...],
        settles: _Start | None,
        streams: StreamBuffer | None,
    ) -> Iterator[LogConnection]:
        conn = self.conn
        entries: list[Pending] = []
        # A stop signal waits for the end of the transaction (see ``interrupts``).
        with interrupts.critical():
            try:
                self._set_sync(self._base_sync if durable else "NORMAL")
                now = self._clock()
                # The fence below locks the run row first; on PostgreSQL the statements up to
                # it go in one round trip, the rest with the COMMIT in another.
                conn.execute(RUN_WRITE_BATCHED)
                u = self.usage
                args: tuple[Any, ...] = (
                    now,
                    now + self._lease_seconds,
                    boot_clock() + self._lease_seconds,
                    self.seconds_used(),
                    u.steps,
                    u.tokens,
                    u.tokens_estimated,
                    u.reserved_tokens,
                    u.cost_usd,
                    u.reserved_cost_usd,
                    u.retries,
                    u.executions,
                    *run_args,
                    self.run_id,
                    self.incarnation,
                )
                if not run_sets:
                    sql = _FENCE_SQL
                elif (
                    "lease_expires" in run_sets
                ):  # the lease let go: one assignment per column (PostgreSQL)
                    sql = _FENCE_SQL.replace(" lease_expires = ?,", "", 1).replace(
                        " WHERE", ", " + run_sets + " WHERE", 1
                    )
                    args = args[:1] + args[2:]
                else:
                    sql = _FENCE_SQL.replace(" WHERE", ", " + run_sets + " WHERE", 1)
                cur = conn.execute(sql, args)
                rows = cur.fetchall()  # drained: a statement left active would block the COMMIT
                mine = rows[0] if rows else None
                if mine is not None and mine[0] is not None:
                    self.cancel_requested = mine[0]
                if mine is None:
                    self.fenced.set()
                    raise Fenced(
                        f"run {self.run_id}: a newer engine took it over; this one (incarnation "
                        f"{self.incarnation}) stops"
                    )
                pending = self._deferred
                if pending is not None and (pending is settles or pending.written):
                    pending = None
                if pending is not None:
                    self._write_start(conn, pending, self.incarnation)
                    self._open.add(pending.seq)  # before the write below may end it
                if streams is not None:
                    entries = streams.take()
                    if entries:
                        from steplog.log.streams import insert

                        insert(conn, self.run_id, self.incarnation, entries)
                yield conn
                conn.execute("COMMIT")
                if pending is not None:
                    pending.written = True
                    self._deferred = None
                if settles is not None and self._deferred is settles:
                    self._deferred = None
                self._committed = dict(vars(self.usage))  # a plain dict: this runs once per step
            except BaseException as exc:
                rollback(conn)
                if entries and streams is not None:
                    streams.put_back(entries)
                # The counters the callers raised for this write were not written: forget them,
                # or releasing the lease next (which writes them too) would record a step that
                # was never committed.
                vars(self.usage).update(self._committed)
                d = self._deferred
                if d is not None and not d.written:
                    self.usage.executions += d.executions  # begun, and its start still to write
                if isinstance(exc, sqlite3.Error):
                    raise LogWriteError(
                        f"writing the log failed ({first_line(exc)}); nothing was half-written: "
                        "free disk space or fix the file, then run the same command again to "
                        "resume from the last checkpoint"
                    ) from exc
                raise

    def _event(self, kind: str, seq: int | None, data: Mapping[str, Any]) -> None:
        """One event in the open transaction; ``data`` is its kind's payload
        (``events.PAYLOADS``)."""
        append_event(
            self.conn, self.run_id, self.incarnation, kind, data, seq=seq, ts=self._clock()
        )

    # -- steps ------------------------------------------------------------------------------

    def begin_attempt(
        self,
        seq: int,
        name: str,
        kind: str,
        *,
        attempt: int,
        recoveries: int,
        fresh: bool,
        durable: bool,
        reserve_tokens: int = 0,
        reserve_cost: float = 0.0,
        counted: bool = True,
        defer: bool = False,
        executions: int = 1,
    ) -> None:
        """Commit that attempt ``attempt`` of step ``seq`` starts (and reserve its model budget).
        ``counted=False``: a wait taken up again, which redoes nothing (not an execution);
        ``executions``: how many it counts as (more than one when engines that died left no
        start of it: ``deaths_since_progress``).

        ``defer``: a fresh plain step may have its start written later (see the module): it is
        deferred when no other step is in flight, so at most one start is ever unwritten and a
        reader knows which step a kill cut short."""
        u = self.usage
        u.executions += executions if counted else 0
        if defer and fresh and self._deferred is None and not self._open and not reserve_tokens:
            self._deferred = _Start(
                seq,
                name,
                kind,
                attempt,
                recoveries,
                self._clock(),
                self._monotonic(),
                executions if counted else 0,
            )
            if self.observer is not None:
                self.observer.attempt_started(
                    seq, name, kind, attempt=attempt, recoveries=recoveries
                )
            return
        u.reserved_tokens += reserve_tokens
        u.reserved_cost_usd += reserve_cost
        now = self._clock()
        self._open.add(seq)
        with self._tx(durable=durable):
            if fresh:
                self.conn.execute(
                    _STARTED_SQL,
                    (
                        self.run_id,
                        seq,
                        name,
                        kind,
                        attempt,
                        recoveries,
                        now,
                        self.incarnation,
                        self.hashes.get(seq),
                    ),
                )
            else:
                self.conn.execute(
                    "UPDATE step SET status = 'running', attempts = ?, recoveries = ?, started_at "
                    "= ?, incarnation = ?, error = NULL WHERE run_id = ? AND seq = ?",
                    (attempt, recoveries, now, self.incarnation, self.run_id, seq),
                )
            # Attempt 1, no recoveries and no reservation are the common case and left out.
            data: StepStarted = {
                "name": name,
                "kind": kind,
                "usage": u.snapshot(self.seconds_used(), compact=True),
            }
            if attempt != 1:
                data["attempt"] = attempt
            if recoveries:
                data["recoveries"] = recoveries
            if reserve_tokens:
                data["reserved_tokens"] = reserve_tokens
            self._event(EventKind.STEP_STARTED, seq, data)
        if self.observer is not None:
            self.observer.attempt_started(seq, name, kind, attempt=attempt, recoveries=recoveries)

    def _write_start(self, conn: LogConnection, d: _Start, incarnation: int) -> None:
        """A deferred start, written now (in the caller's transaction): the step row, running,
        and its ``step_started`` with ``started`` (when it began)."""
        conn.execute(
            _STARTED_SQL,
            (
                self.run_id,
                d.seq,
                d.name,
                d.kind,
                d.attempt,
                d.recoveries,
                d.at,
                incarnation,
                self.hashes.get(d.seq),
            ),
        )
        data: StepStarted = {
            "name": d.name,
            "kind": d.kind,
            "usage": self.usage.snapshot(self.seconds_used(), compact=True),
            "started": d.at,
        }
        if d.attempt != 1:
            data["attempt"] = d.attempt
        if d.recoveries:
            data["recoveries"] = d.recoveries
        append_event(
            conn,
            self.run_id,
            incarnation,
            EventKind.STEP_STARTED,
            data,
            seq=d.seq,
            ts=self._clock(),
        )

    def record_late_start(self, conn: LogConnection, *, after: float = LATE_START_SECONDS) -> None:
        """The heartbeat's part: write the deferred start of a step running for ``after`` seconds
        or more, on the heartbeat's own connection (not fsynced: a kill cannot lose it). The
        main thread's next transaction waits for it, and then knows the start is written."""
        d = self._deferred
        if d is None or d.written or self._monotonic() - d.t0 < after:
            return
        with self._deferred_lock:
            if self._deferred is not d or d.written:
                return  # committed (or written) meanwhile
            try:
                conn.execute(RUN_WRITE)
                mine = conn.execute(
                    "UPDATE run SET updated_at = ?, step_executions = ? WHERE id = ? AND "
                    "incarnation = ? RETURNING id",
                    (self._clock(), self.usage.executions, self.run_id, self.incarnation),
                ).fetchall()
                if not mine:
                    rollback(conn)
                    self.fenced.set()
                    return
                self._write_start(conn, d, self.incarnation)
                conn.execute("COMMIT")
            except sqlite3.Error:
                rollback(conn)  # the step's own next write records its start then
                return
            d.written = True
            self._committed["executions"] = self.usage.executions  # the log holds it now

    def count_retry(self) -> None:
        self.usage.retries += 1

    def record_decision(
        self,
        seq: int,
        decision: dict[str, Any],
        *,
        tokens_in: int,
        tokens_out: int,
        tokens_cached: int,
        estimated: bool,
        cost: float,
        reserved_tokens: int,
        reserved_cost: float,
    ) -> None:
        """Commit the model's answer before anything acts on it; swap reservation for usage."""
        u = self.usage
        u.reserved_tokens -= reserved_tokens
        u.reserved_cost_usd -= reserved_cost
        u.tokens += tokens_in + tokens_out
        if estimated:
            u.tokens_estimated += tokens_in + tokens_out
        u.cost_usd += cost
        with self._tx():
            self.conn.execute(
                "UPDATE step SET phase = 'decided', decision = ?, tokens_in = ?, tokens_out = ?, "
                "tokens_cached = ?, tokens_estimated = ?, cost_usd = ? WHERE run_id = ? AND seq = "
                "?",
                (
                    dumps(decision),
                    tokens_in,
                    tokens_out,
                    tokens_cached,
                    int(estimated),
                    cost,
                    self.run_id,
                    seq,
                ),
            )
            self._event(
                EventKind.DECISION_RECORDED,
                seq,
                {
                    "tokens_in": tokens_in,
                    "tokens_out": tokens_out,
                    "estimated": estimated,
                    "cost_usd": cost,
                    "usage": u.snapshot(self.seconds_used()),
                },
            )
        if self.observer is not None:
            self.observer.decision_recorded(
                seq,
                decision,
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                tokens_cached=tokens_cached,
                estimated=estimated,
                cost=cost,
            )

    def fail_attempt(
        self,
        seq: int,
        error: str,
        *,
        will_retry: bool,
        release_tokens: int = 0,
        release_cost: float = 0.0,
    ) -> None:
        u = self.usage
        # A failed model call spent nothing we know of; the provider did not bill an error.
        u.reserved_tokens -= release_tokens
        u.reserved_cost_usd -= release_cost
        with self._tx():
            self.conn.execute(
                "UPDATE step SET status = ?, error = ?, finished_at = ? WHERE run_id = ? AND seq "
                "= ?",
                ("running" if will_retry else "failed", error, self._clock(), self.run_id, seq),
            )
            if not will_retry:
                self._open.discard(seq)
            self._event(
                EventKind.STEP_ATTEMPT_FAILED,
                seq,
                {
                    "error": error,
                    "will_retry": will_retry,
                    "usage": u.snapshot(self.seconds_used()),
                },
            )
        if self.observer is not None:
            self.observer.attempt_failed(seq, error, will_retry=will_retry)

    def commit_step(
        self,
        seq: int,
        name: str,
        kind: str,
        result_json: str,
        *,
        duration: float,
        entry: Pending | None = None,
        publish: tuple[str, str] | None = None,
    ) -> None:
        """The checkpoint: the step's result is recorded; it will never run again. ``entry``: a
        stream entry written in the same transaction (``run.emit`` between steps: exactly once);
        ``publish``: ``(key, value JSON)`` of the run's event set by this step (``run.set_event``),
        written in the same transaction."""
        u = self.usage
        u.steps += 1
        d = self._deferred
        if d is not None and d.seq != seq:
            d = None
        with self._tx(settles=d):
            now = self._clock()
            if entry is not None:
                from steplog.log.streams import insert

                insert(self.conn, self.run_id, self.incarnation, [entry])
            if publish is not None:
                self.conn.execute(_PUBLISH_SQL, (self.run_id, *publish, seq, now))
            if d is not None and not d.written:
                # Its start was never written: one row, inserted committed, and one event.
                self.conn.execute(
                    _COMMITTED_SQL,
                    (
                        self.run_id,
                        seq,
                        name,
                        kind,
                        result_json,
                        d.attempt,
                        d.recoveries,
                        d.at,
                        now,
                        self.incarnation,
                        self.hashes.get(seq),
                    ),
                )
                data: StepCommitted = {
                    "name": name,
                    "kind": kind,
                    "started": d.at,  # and no ``duration``: it ran from then to this event
                    "usage": u.snapshot(self.seconds_used(), compact=True),
                }
                if d.attempt != 1:
                    data["attempt"] = d.attempt
                if d.recoveries:
                    data["recoveries"] = d.recoveries
                self._event(EventKind.STEP_COMMITTED, seq, data)
            else:
                self.conn.execute(
                    "UPDATE step SET status = 'committed', phase = 'recorded', result = ?, "
                    "finished_at = ? WHERE run_id = ? AND seq = ?",
                    (result_json, now, self.run_id, seq),
                )
                # The name and kind are in this attempt's ``step_started`` (and the step row).
                self._event(
                    EventKind.STEP_COMMITTED,
                    seq,
                    {
                        "duration": round(duration, 6),
                        "usage": u.snapshot(self.seconds_used(), compact=True),
                    },
                )
            self._open.discard(seq)
        if self.observer is not None:
            self.observer.step_committed(seq)

    # -- waiting for a signal ---------------------------------------------------------------

    def begin_wait(
        self,
        seq: int,
        name: str | None,
        decision: dict[str, Any],
        *,
        topic: str | None = None,
        sleep_until: float | None = None,
    ) -> None:
        """The run now waits: for signal ``name``, for a message on ``topic`` (``run.recv``), or
        (both ``None``) until ``sleep_until`` (``run.sleep``). Status ``waiting``, the wait's
        deadline kept in the step's decision (so a resumed engine keeps the same deadline) and on
        the run row (``waiting_until``: a worker takes the run up again then)."""
        # The wait's start is the first engine's, kept in the step's decision: an engine that
        # takes the wait up again after a kill does not restart it (nor the monitor's "since").
        since = decision.get("since") or self._clock()
        with self._tx(
            run_sets="status = 'waiting', waiting_for = ?, waiting_since = ?, waiting_until = ?, "
            "waiting_topic = ?",
            run_args=(name, since, decision.get("deadline"), topic),
        ):
            self.conn.execute(
                "UPDATE step SET phase = 'waiting', decision = ? WHERE run_id = ? AND seq = ?",
                (dumps(decision), self.run_id, seq),
            )
            data: Waiting = {
                "signal": name,
                "deadline": decision.get("deadline"),
                "since": since,
                "usage": self.usage.snapshot(self.seconds_used()),
            }
            if topic is not None:
                data["topic"] = topic
            if sleep_until is not None:
                data["sleep_until"] = sleep_until
            self._event(EventKind.WAITING, seq, data)

    def commit_wait(
        self,
        seq: int,
        name: str,
        kind: str,
        result_json: str,
        *,
        signal_id: int | None,
        duration: float,
        message_id: int | None = None,
    ) -> bool:
        """Record the wait step with the signal (or message, ``message_id``) it consumes, both in
        one transaction: each is consumed exactly once however the engine dies. ``False`` if
        another engine consumed it first (this one is then fenced anyway)."""
        u = self.usage
        u.steps += 1
        now = self._clock()
        try:
            self._commit_wait(
                seq,
                name,
                kind,
                result_json,
                signal_id=signal_id,
                message_id=message_id,
                duration=duration,
                now=now,
            )
        except _SignalTaken:
            u.steps -= 1
            return False
        if self.observer is not None:
            self.observer.step_committed(seq)
        return True

    def _commit_wait(
        self,
        seq: int,
        name: str,
        kind: str,
        result_json: str,
        *,
        signal_id: int | None,
        message_id: int | None,
        duration: float,
        now: float,
    ) -> None:
        u = self.usage
        with self._tx(run_sets="status = 'running', waiting_for = NULL, waiting_since = NULL"):
            for table, row_id in (("signal", signal_id), ("message", message_id)):
                if row_id is None:
                    continue
                cur = self.conn.execute(
                    f"UPDATE {table} SET consumed_seq = ?, consumed_at = ? WHERE id = ? AND "
                    "consumed_seq IS NULL",
                    (seq, now, row_id),
                )
                if cur.rowcount != 1:
                    raise _SignalTaken()
            self.conn.execute(
                "UPDATE step SET status = 'committed', phase = 'recorded', result = ?, "
                "finished_at = ? WHERE run_id = ? AND seq = ?",
                (result_json, now, self.run_id, seq),
            )
            self._open.discard(seq)
            data: StepCommitted = {
                "name": name,
                "kind": kind,
                "duration": round(duration, 6),
                "signal_id": signal_id,
                "usage": u.snapshot(self.seconds_used()),
            }
            if message_id is not None:
                data["message_id"] = message_id
            self._event(EventKind.STEP_COMMITTED, seq, data)

    # -- effects (the idempotency ledger) ---------------------------------------------------

    def effect_started(
        self,
        key: str,
        seq: int,
        idx: int,
        kind: str,
        target: str,
        request_hash: str,
        idempotent: bool,
        *,
        again: bool,
    ) -> None:
        now = self._clock()
        with self._tx():
            if again:
                self.conn.execute("UPDATE effect SET attempts = attempts + 1 WHERE key = ?", (key,))
            else:
                self.conn.execute(
                    "INSERT INTO effect (key, run_id, seq, idx, kind, target, idempotent, status, "
                    "request_hash, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'started', ?, ?)",
                    (key, self.run_id, seq, idx, kind, target, int(idempotent), request_hash, now),
                )
            self.conn.execute(
                "UPDATE step SET phase = 'acting' WHERE run_id = ? AND seq = ?", (self.run_id, seq)
            )
            self._event(
                EventKind.EFFECT_STARTED,
                seq,
                {"key": key, "kind": kind, "target": target, "again": again},
            )
        if self.observer is not None:
            self.observer.effect_started(seq, key, kind, target, again=again)

    def effect_completed(self, key: str, seq: int, response_json: str) -> None:
        with self._tx():
            self.conn.execute(
                "UPDATE effect SET status = 'completed', response = ?, completed_at = ? WHERE key "
                "= ?",
                (response_json, self._clock(), key),
            )
            self._event(EventKind.EFFECT_COMPLETED, seq, {"key": key})
        if self.observer is not None:
            self.observer.effect_completed(seq, key)

    # -- the run ----------------------------------------------------------------------------

    def finish(
        self,
        status: str,
        reason: str | None,
        result_json: str | None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """The terminal transaction: status, reason, result, and the lease released."""
        self.finishing.set()
        if self.streams is not None:
            self.streams.close()  # every entry before the terminal record
        now = self._clock()
        with self._tx(
            run_sets="status = ?, reason = ?, result = ?, finished_at = ?, lease_pid = NULL,"
            " lease_expires = NULL, waiting_for = NULL, waiting_since = NULL",
            run_args=(status, reason, result_json, now),
        ):
            self._event(
                EventKind.RUN_FINISHED,
                None,
                {
                    "status": status,
                    "reason": reason,
                    **(details or {}),
                    "usage": self.usage.snapshot(self.seconds_used()),
                },
            )
        if self.observer is not None:
            self.observer.incarnation_ended(status, reason)

    def refuse(self, blocked_json: str, data: Mapping[str, Any]) -> None:
        """The code cannot replay the run (``steplog.Blocked``), found after the claim: the
        refusal recorded (``run.blocked``, ``resume_refused``) and the lease let go, in one
        transaction; the status is left as it is."""
        if self.streams is not None:
            self.streams.close()
        with interrupts.shielded():
            with self._tx(
                run_sets="blocked = ?, lease_pid = NULL, lease_expires = NULL",
                run_args=(blocked_json,),
            ):
                self._event(EventKind.RESUME_REFUSED, None, data)
        if self.observer is not None:
            self.observer.incarnation_ended(None, "refused: the code cannot replay the run")

    def release(self) -> None:
        """Let go of the lease without finishing (the process is stopping for another reason)."""
        if self.streams is not None:
            self.streams.close()
        try:
            with interrupts.shielded():  # the process is stopping already
                with self._tx(run_sets="lease_pid = NULL, lease_expires = NULL"):
                    self._event(
                        EventKind.LEASE_RELEASED,
                        None,
                        {"usage": self.usage.snapshot(self.seconds_used())},
                    )
            if self.observer is not None:
                self.observer.incarnation_ended(None, "released: the engine was stopped")
        except (Fenced, LogWriteError, sqlite3.Error):
            pass  # the next engine takes a dead holder's lease over anyway


def renew_lease(
    conn: LogConnection, run_id: str, incarnation: int, *, seconds_used: float, lease_seconds: float
) -> tuple[bool, str | None]:
    """The heartbeat's write, on a connection of its own: the lease runs ``lease_seconds`` from
    now, and the active seconds so far are recorded (a kill then loses at most one period of
    them). ``(False, None)``: the run is no longer this incarnation's, or no longer running;
    else ``(True, the cancel request or None)``."""
    rows = conn.execute(
        "UPDATE run SET lease_expires = ?, lease_expires_boot = ?, used_seconds = ? WHERE id = ? "
        "AND incarnation = ? AND status IN ('running', 'waiting') RETURNING cancel_requested",
        (
            time.time() + lease_seconds,
            boot_clock() + lease_seconds,
            seconds_used,
            run_id,
            incarnation,
        ),
    ).fetchall()
    return (True, rows[0][0]) if rows else (False, None)


class _SignalTaken(Exception):
    """Rolls ``commit_wait`` back: the signal was consumed in between (by a newer engine)."""


def deaths_inside(conn: LogConnection, run_id: str, seq: int, *, current: int) -> int:
    """How many engines died inside step ``seq``: incarnations before ``current`` that started it
    and never ended cleanly (no ``lease_released`` or ``run_finished``). A stop (SIGTERM, cancel,
    exit while waiting) ends cleanly: it is no death, and no poison pill. Read on the rare path of
    resuming a step an earlier engine left running."""
    started = {
        i
        for (i,) in conn.execute(
            "SELECT DISTINCT incarnation FROM event WHERE run_id = ? AND seq = ? AND kind = ? AND "
            "incarnation < ?",
            (run_id, seq, EventKind.STEP_STARTED, current),
        )
    }
    if not started:
        return 0
    clean = {
        i
        for (i,) in conn.execute(
            "SELECT DISTINCT incarnation FROM event WHERE run_id = ? AND kind IN (?, ?) AND "
            "incarnation < ?",
            (run_id, EventKind.LEASE_RELEASED, EventKind.RUN_FINISHED, current),
        )
    }
    return len(started - clean)


_ENGINE_KINDS = (
    EventKind.LEASE_ACQUIRED,
    EventKind.LEASE_RELEASED,
    EventKind.RUN_FINISHED,
    EventKind.STEP_STARTED,
    EventKind.DECISION_RECORDED,
    EventKind.EFFECT_STARTED,
    EventKind.EFFECT_COMPLETED,
    EventKind.STEP_ATTEMPT_FAILED,
    EventKind.STEP_COMMITTED,
    EventKind.WAITING,
)
"""The events an engine writes itself (others write under its incarnation too: a signal, a
cancel request)."""
_LAST_OF_ENGINE = (
    "SELECT kind, seq FROM event WHERE run_id = ? AND incarnation = ? AND kind IN "
    f"({', '.join('?' * len(_ENGINE_KINDS))}) ORDER BY id DESC LIMIT 1"
)


def deaths_since_progress(conn: LogConnection, run_id: str, seq: int, *, current: int) -> int:
    """How many engines died inside fresh step ``seq`` (or just before it) without writing its
    start (a deferred start): walking back from the engine before ``current``, each that died
    with no progress at all counts, and the one that died right after committing step
    ``seq - 1``. A clean end (a stop, a finish) or any other last write ends the walk. One
    indexed read per engine walked, on the first new step of an engine that took over."""
    deaths = 0
    for incarnation in range(current - 1, 0, -1):
        row = conn.execute(_LAST_OF_ENGINE, (run_id, incarnation, *_ENGINE_KINDS)).fetchone()
        if row is None:
            break
        kind, last_seq = row[0], row[1]
        if kind == EventKind.LEASE_ACQUIRED:
            deaths += 1  # it died where the engine before it had got to
            continue
        if kind == EventKind.STEP_COMMITTED and last_seq == seq - 1:
            deaths += 1
        break
    return deaths


def pending_signal(conn: LogConnection, run_id: str, name: str) -> tuple[int, str] | None:
    """The oldest unconsumed signal ``name`` for the run: ``(id, data JSON)``."""
    row = conn.execute(
        "SELECT id, data FROM signal WHERE run_id = ? AND name = ? AND consumed_seq IS NULL ORDER "
        "BY id LIMIT 1",
        (run_id, name),
    ).fetchone()
    return (int(row[0]), str(row[1])) if row else None


def cancel_request(conn: LogConnection, run_id: str) -> str | None:
    row = conn.execute("SELECT cancel_requested FROM run WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else None
