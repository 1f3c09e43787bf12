"""The queue's rows: the runs a worker may claim, a worker's claim on one, and its hand-back.

``steplog.control.queue`` decides which candidate is free (``lease.vacancy`` of its engine and of
the worker that may have claimed it); the reads and writes are here. A claim and a hand-back are
each one run's write (``db.run_write``): on SQLite the write lock serialises claimers; on
PostgreSQL workers claim side by side, the candidates read without locks and the one chosen read
again locked (``candidate_locked``), so a row another worker (or the run's engine) is writing is
skipped, not waited for.
"""

from __future__ import annotations

from collections.abc import Collection

from steplog.log.db import (
    LogConnection,
    LogRow,
    announce_claimable,
    for_update,
    named_rows,
    run_write,
)
from steplog.log.events import EventKind
from steplog.log.journal import append_event
from steplog.log.lease import Holder
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL

# The claimable rows, oldest first, prefiltered in SQL; whether a holder on this host is dead
# is a question for the OS, so the caller's ``vacancy`` has the last word.
_CLAIMABLE = (
    "SELECT id, agent, status, launch, lease_pid, lease_host, lease_boot, lease_proc_start, "
    "lease_expires, lease_expires_boot, worker_pid, worker_host, worker_boot, worker_proc_start, "
    "worker_claimed_at, version, incarnation FROM run WHERE status IN ('queued', 'running', "
    "'waiting') AND (lease_pid IS "
    "NULL OR lease_expires IS NULL OR lease_expires <= ? OR lease_host = ?) AND (status <> "
    "'waiting' OR waiting_until <= ? OR EXISTS (SELECT 1 FROM signal WHERE signal.run_id = run.id "
    "AND signal.name = run.waiting_for AND signal.consumed_seq IS NULL) OR EXISTS (SELECT 1 FROM "
    "message WHERE message.run_id = run.id AND message.topic = run.waiting_topic AND "
    "message.consumed_seq IS NULL))"
)
WAKE_LEAD_SECONDS = 1.0
"""A waiting run whose wait ends within this long is claimable already: its engine starts and
takes the wait up in time to end it on time (a sleep wakes on the second, not an engine start
late)."""
_CANDIDATES = _CLAIMABLE + "{agents} ORDER BY created_at, id LIMIT ? OFFSET ?"
_CANDIDATE = _CLAIMABLE + " AND id = ?{lock}"


def candidates(
    conn: LogConnection,
    *,
    now: float,
    host: str,
    agents: Collection[str] = (),
    prefix: str = "",
    limit: int,
    offset: int,
) -> list[LogRow]:
    """A page of the runs nobody may be working on, oldest first (columns by name): queued,
    running with a lease expired or held on ``host`` (the caller asks the OS), waiting with its
    signal or message in or its wait (or sleep) over. ``agents``: only runs of these agent
    specs; ``prefix``: only runs whose id starts with it (case-sensitive on both logs, unlike
    ``LIKE`` in SQLite)."""
    filters = (f" AND agent IN ({', '.join('?' for _ in agents)})" if agents else "") + (
        " AND substr(id, 1, ?) = ?" if prefix else ""
    )
    wanted = (*agents, *((len(prefix), prefix) if prefix else ()))
    with named_rows(conn):
        rows: list[LogRow] = conn.execute(
            _CANDIDATES.format(agents=filters),
            (now, host, now + WAKE_LEAD_SECONDS, *wanted, limit, offset),
        ).fetchall()
    return rows


def candidate_locked(
    conn: LogConnection, candidate: LogRow, *, now: float, host: str
) -> LogRow | None:
    """``candidate`` as it is now, in the claim's transaction, locked for it where rows are
    locked one by one (PostgreSQL: ``FOR UPDATE SKIP LOCKED``; ``None`` when another transaction
    holds it or it is no longer claimable). On SQLite the transaction's write lock covers the
    database: the candidate is taken as read."""
    lock = for_update(conn, skip_locked=True)
    if not lock:
        return candidate
    with named_rows(conn):
        row: LogRow | None = conn.execute(
            _CANDIDATE.format(lock=lock), (now, host, now + WAKE_LEAD_SECONDS, candidate["id"])
        ).fetchone()
    return row


def record_claim(
    conn: LogConnection, run: LogRow, worker: Holder, now: float, *, takeover: str | None
) -> None:
    """Write ``worker``'s claim on the run row, with its ``worker_claimed`` event (inside the
    caller's ``run_write``). ``takeover``: why the previous engine's lease was free."""
    conn.execute(
        "UPDATE run SET worker_host = ?, worker_pid = ?, worker_boot = ?, worker_proc_start = ?, "
        "worker_claimed_at = ?, updated_at = ? WHERE id = ?",
        (worker.host, worker.pid, worker.boot, worker.proc_start, now, now, run["id"]),
    )
    _event(
        conn,
        run["id"],
        now,
        EventKind.WORKER_CLAIMED,
        {
            "worker": {"host": worker.host, "pid": worker.pid},
            "status": run["status"],
            **({"takeover": takeover} if takeover else {}),
        },
    )


def hand_back(
    conn: LogConnection, run_id: str, *, exit_code: int, worker: Holder, now: float
) -> str | None:
    """The worker's engine on ``run_id`` exited with ``exit_code``: the run is no longer this
    worker's (a finished one keeps its name as who ran it last), and a ``worker_released`` event
    says so. The run's status, or ``None`` when another worker has claimed it since."""
    with run_write(conn):
        row = conn.execute(
            "SELECT status, incarnation, worker_pid, worker_host, worker_boot FROM run WHERE id = ?"
            + for_update(conn),
            (run_id,),
        ).fetchone()
        if row is None or tuple(row[2:5]) != (worker.pid, worker.host, worker.boot):
            return None
        status = str(row[0])
        if status not in TERMINAL:
            conn.execute(
                "UPDATE run SET worker_host = NULL, worker_pid = NULL, worker_boot = NULL, "
                "worker_proc_start = NULL, worker_claimed_at = NULL, updated_at = ? WHERE id = ?",
                (now, run_id),
            )
            if status != RunStatus.WAITING:  # stopped, or held elsewhere: claimable again
                announce_claimable(conn, run_id)
        append_event(
            conn,
            run_id,
            int(row[1]),
            EventKind.WORKER_RELEASED,
            {
                "worker": {"host": worker.host, "pid": worker.pid},
                "exit_code": exit_code,
                "status": status,
            },
            ts=now,
        )
        return status


def _event(
    conn: LogConnection, run_id: str, now: float, kind: str, data: dict[str, object]
) -> None:
    incarnation = conn.execute("SELECT incarnation FROM run WHERE id = ?", (run_id,)).fetchone()[0]
    append_event(conn, run_id, incarnation, kind, data, ts=now)
