"""The queue: runs recorded now and started later, by whichever worker claims them.

- **submit** (``steplog submit``): checks the agent and every run option exactly as ``steplog
  run`` does, then records the run as ``queued`` with how to start it (``launch``). Nothing runs.
- **claim** (``claim_next_run``, a worker's): the oldest run that nobody works on: ``queued`` ones,
  ``running`` ones whose engine is gone (same host: dead now; elsewhere: lease expired; the rules
  of ``lease.vacancy``), and ``waiting`` ones whose signal has arrived or whose wait timed out.
  The worker writes its identity on the row (``worker_*``) and an event, then starts an engine,
  which takes the lease as any engine does (a kill before that is a dead claim: taken over like
  a dead lease).
- **hand back** (``hand_back``): the worker's engine exited; the run carries the worker's name
  no longer (unless it ended, then it says who ran it last).

A claim and a hand-back are each one run's write (``db.run_write``). On SQLite the write lock
serialises claimers. On PostgreSQL workers claim side by side: the candidates are read without
locks, and the one chosen is read again ``FOR UPDATE SKIP LOCKED`` (``_CANDIDATE``) and judged
again: a row another worker (or the run's engine) is writing is skipped, not waited for.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import UsageError
from steplog.log.claim import Request, create_run
from steplog.log.db import LogConnection, for_update, immediate, location, open_log, run_write
from steplog.log.events import EventKind
from steplog.log.integrity import probe
from steplog.log.journal import dumps
from steplog.log.launch import Launch
from steplog.log.lease import DEFAULT_LEASE_SECONDS, Holder, me, row_vacancy, vacancy
from steplog.log.location import LogLocation
from steplog.log.status import TERMINAL

if TYPE_CHECKING:
    from steplog.runtime.agent import Agent

CLAIM_BATCH = 32
"""Candidates read at a time while looking for a claimable one."""


def submit(
    agent: Agent[..., Any],
    *,
    run_id: str | None = None,
    db: LogLocation | str | None = None,
    workdir: Path | None = None,
    outbox: str | None = None,
    params: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    model: str | None = None,
    launch: Launch = Launch(),
) -> str:
    """Record a new ``queued`` run of ``agent``; its id. Refused (``UsageError``, nothing
    written) on exactly what ``steplog run`` refuses, and on an id that exists already."""
    from steplog.log.runids import new_run_id
    from steplog.runtime.engine import check_start

    lease = launch.lease_seconds if launch.lease_seconds is not None else DEFAULT_LEASE_SECONDS
    bound = check_start(
        agent,
        run_id=run_id,
        outbox=outbox,
        params=params,
        limits=limits,
        pace=launch.pace,
        lease_seconds=lease,
        new=True,
        model=model,
    )
    rid = run_id or new_run_id()
    path = location(db)
    conn = open_log(path)
    conn.row_factory = sqlite3.Row
    try:
        with immediate(conn):
            probe(conn, path, rid)
            if conn.execute("SELECT 1 FROM run WHERE id = ?", (rid,)).fetchone():
                raise UsageError(
                    f"run {rid} exists already; submit a new run without --run-id, or run that one "
                    f"with `steplog run {agent.default_spec()} --run-id {rid}`"
                )
            create_run(
                conn,
                Request(
                    agent=agent,
                    spec=agent.default_spec(),
                    run_id=rid,
                    db_path=path,
                    workdir=workdir,
                    outbox=outbox,
                    params=bound,
                    limits=limits or {},
                    model=model,
                    lease_seconds=lease,
                ),
                time.time(),
                launch=launch,
            )
    finally:
        conn.close()
    return rid


@dataclass(frozen=True)
class Job:
    """A run a worker claimed: what its engine is started with."""

    run_id: str
    agent: str
    launch: Launch
    status: str
    """Its status when claimed (``queued``, ``running`` after a dead engine, ``waiting`` with its
    signal in or its wait timed out)."""
    takeover: str | None
    """Why the previous engine's lease was free (``None``: no engine had it)."""


# The claimable rows, oldest first, prefiltered in SQL; whether a holder on this host is dead
# is a question for the OS, so ``_vacant`` has the last word.
_CLAIMABLE = (
    "SELECT id, agent, status, launch, lease_pid, lease_host, lease_boot, lease_proc_start, lease_expires, lease_expires_boot,"
    " worker_pid, worker_host, worker_boot, worker_proc_start, worker_claimed_at FROM run"
    " WHERE status IN ('queued', 'running', 'waiting')"
    " AND (lease_pid IS NULL OR lease_expires IS NULL OR lease_expires <= ? OR lease_host = ?)"
    " AND (status <> 'waiting' OR waiting_until <= ? OR EXISTS (SELECT 1 FROM signal"
    " WHERE signal.run_id = run.id AND signal.name = run.waiting_for AND signal.consumed_seq IS NULL))"
)
_CANDIDATES = _CLAIMABLE + "{agents} ORDER BY created_at, id LIMIT ? OFFSET ?"
_CANDIDATE = _CLAIMABLE + " AND id = ?{lock}"
"""One candidate again, inside the claim's transaction, locked (PostgreSQL) as it is judged."""


def _vacant(row: sqlite3.Row, worker: Holder, lease_seconds: float, now: float) -> str | None:
    """Why nobody works on this run now (for the log), or ``None``: an engine or another
    worker has it. A worker's claim counts as a lease of ``lease_seconds`` from its start."""
    why = row_vacancy(row, now)
    if why is None:
        return None
    mine = (row["worker_pid"], row["worker_host"], row["worker_boot"]) == (
        worker.pid,
        worker.host,
        worker.boot,
    )
    if row["worker_pid"] is not None and not mine:
        claimed_at = row["worker_claimed_at"] or 0.0
        if (
            vacancy(
                pid=row["worker_pid"],
                host=row["worker_host"],
                boot=row["worker_boot"],
                proc_start=row["worker_proc_start"],
                expires=claimed_at + lease_seconds,
                now=now,
            )
            is None
        ):
            return None
    return why


def claim_next_run(
    conn: LogConnection,
    *,
    worker: Holder | None = None,
    agents: Collection[str] = (),
    prefix: str = "",
    skip: Collection[str] = (),
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> Job | None:
    """Claim the oldest run nobody works on for ``worker`` (default: this process), or ``None``.

    The one place the queue's claim lives. ``agents``: only runs of these agent specs;
    ``prefix``: only runs whose id starts with it (case-sensitive on both logs, unlike ``LIKE``
    in SQLite); ``skip``: run ids this worker will not take now (its own engines' runs, parked ones).
    """
    holder = worker or me()
    now = time.time()
    filters = (f" AND agent IN ({', '.join('?' for _ in agents)})" if agents else "") + (
        " AND substr(id, 1, ?) = ?" if prefix else ""
    )
    wanted = (*agents, *((len(prefix), prefix) if prefix else ()))
    sql = _CANDIDATES.format(agents=filters)
    lock = for_update(conn, skip_locked=True)
    one = _CANDIDATE.format(lock=lock)

    def first_vacant(*, locked: bool) -> tuple[sqlite3.Row, str] | None:
        """Page through the candidates (many may be held by live engines) to the first free one;
        ``locked``: in the claim's transaction, where a server database locks the one it takes."""
        offset = 0
        while True:
            rows = conn.execute(
                sql, (now, holder.host, now, *wanted, CLAIM_BATCH, offset)
            ).fetchall()
            for row in rows:
                why = _vacant(row, holder, lease_seconds, now) if row["id"] not in skip else None
                if why is not None and locked and lock:
                    row = conn.execute(one, (now, holder.host, now, row["id"])).fetchone()
                    why = None if row is None else _vacant(row, holder, lease_seconds, now)
                if why is not None:
                    return row, why
            if len(rows) < CLAIM_BATCH:
                return None
            offset += CLAIM_BATCH

    prior = conn.row_factory
    conn.row_factory = sqlite3.Row
    try:
        # Looked at first without the write lock: an idle worker polls without blocking engines.
        if first_vacant(locked=False) is None:
            return None
        with run_write(conn):
            found = first_vacant(locked=True)
            if found is None:
                return None  # another worker was quicker
            row, why = found
            conn.execute(
                "UPDATE run SET worker_host = ?, worker_pid = ?, worker_boot = ?, worker_proc_start = ?,"
                " worker_claimed_at = ?, updated_at = ? WHERE id = ?",
                (holder.host, holder.pid, holder.boot, holder.proc_start, now, now, row["id"]),
            )
            takeover = why if row["lease_pid"] is not None else None
            _event(
                conn,
                row["id"],
                now,
                EventKind.WORKER_CLAIMED,
                {
                    "worker": {"host": holder.host, "pid": holder.pid},
                    "status": row["status"],
                    **({"takeover": takeover} if takeover else {}),
                },
            )
            return Job(
                row["id"], row["agent"], Launch.from_json(row["launch"]), row["status"], takeover
            )
    finally:
        conn.row_factory = prior


def hand_back(
    conn: LogConnection, run_id: str, *, exit_code: int, worker: Holder | None = None
) -> str | None:
    """The worker's engine on ``run_id`` exited with ``exit_code``: the run is no longer this
    worker's (a finished one keeps its name as who ran it last). The run's status, or ``None``
    when another worker has claimed it since."""
    holder = worker or me()
    now = time.time()
    with run_write(conn):
        row = conn.execute(
            "SELECT status, incarnation, worker_pid, worker_host, worker_boot FROM run WHERE id = ?"
            + for_update(conn),
            (run_id,),
        ).fetchone()
        if row is None or tuple(row[2:5]) != (holder.pid, holder.host, holder.boot):
            return None
        status = str(row[0])
        if status not in TERMINAL:
            conn.execute(
                "UPDATE run SET worker_host = NULL, worker_pid = NULL, worker_boot = NULL,"
                " worker_proc_start = NULL, worker_claimed_at = NULL, updated_at = ? WHERE id = ?",
                (now, run_id),
            )
        conn.execute(
            "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, ?, ?, ?)",
            (
                run_id,
                now,
                int(row[1]),
                EventKind.WORKER_RELEASED,
                dumps(
                    {
                        "worker": {"host": holder.host, "pid": holder.pid},
                        "exit_code": exit_code,
                        "status": status,
                    }
                ),
            ),
        )
        return status


def _event(conn: LogConnection, run_id: str, now: float, kind: str, data: dict[str, Any]) -> None:
    incarnation = conn.execute("SELECT incarnation FROM run WHERE id = ?", (run_id,)).fetchone()[0]
    conn.execute(
        "INSERT INTO event (run_id, ts, incarnation, kind, data) VALUES (?, ?, ?, ?, ?)",
        (run_id, now, incarnation, kind, dumps(data)),
    )


def enqueue(conn: LogConnection, run_id: str, launch: Launch | None) -> None:
    """Mark a run no engine has taken yet as ``queued`` (``retry``/``fork --no-start``), with
    how a worker starts it; inside the caller's transaction."""
    conn.execute(
        "UPDATE run SET status = 'queued', launch = COALESCE(?, launch) WHERE id = ?",
        (None if launch is None else launch.to_json(), run_id),
    )


__all__ = ["Job", "claim_next_run", "enqueue", "hand_back", "submit"]
