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

A claim and a hand-back are each one run's write; the rows are read and written by the log
(``steplog.log.queue``), which also knows how claimers take turns. This module decides which
candidate is free, and judges again the one it chose once that is locked for its claim.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steplog.errors import UsageError
from steplog.log import queue as rows
from steplog.log.claim import Request, create_run
from steplog.log.db import LogConnection, LogRow, location, open_log, run_locked, run_write
from steplog.log.integrity import probe
from steplog.log.launch import Launch
from steplog.log.lease import DEFAULT_LEASE_SECONDS, Holder, me, row_vacancy, vacancy
from steplog.log.location import LogLocation
from steplog.log.runs import enqueue, run_exists
from steplog.log.tags import check_tags

if TYPE_CHECKING:
    from steplog.runtime.agent import Agent

CLAIM_BATCH = 32
"""Candidates read at a time while looking for a claimable one."""

AS_BEFORE = Launch()
"""How a submitted run is started unless told otherwise: as ``steplog run`` would (frozen)."""


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
    launch: Launch = AS_BEFORE,
    tags: Mapping[str, str] | None = None,
) -> str:
    """Record a new ``queued`` run of ``agent``; its id. Refused (``UsageError``, nothing
    written) on exactly what ``steplog run`` refuses, and on an id that exists already.
    ``tags``: the run's tags (``steplog.log.tags``)."""
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
    checked_tags = check_tags(tags)
    rid = run_id or new_run_id()
    path = location(db)
    conn = open_log(path)
    try:
        with run_locked(conn, rid):
            probe(conn, path, rid)
            if run_exists(conn, rid):
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
                    tags=checked_tags,
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


def _vacant(row: LogRow, worker: Holder, lease_seconds: float, now: float) -> str | None:
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
    accept: Callable[[LogRow], bool] | None = None,
) -> Job | None:
    """Claim the oldest run nobody works on for ``worker`` (default: this process), or ``None``.

    The one place the queue's claim lives. ``agents``: only runs of these agent specs;
    ``prefix``: only runs whose id starts with it (case-sensitive on both logs, unlike ``LIKE``
    in SQLite); ``skip``: run ids this worker will not take now (its own engines' runs, parked
    ones); ``accept``: asked of each free candidate before it is claimed (a worker's code can
    replay it: ``Worker._can_replay``); a run it refuses is left for another worker.
    """
    holder = worker or me()
    now = time.time()

    def first_vacant(*, locked: bool) -> tuple[LogRow, str] | None:
        """Page through the candidates (many may be held by live engines) to the first free one;
        ``locked``: in the claim's transaction, where the one chosen is read again locked."""
        offset = 0
        while True:
            page = rows.candidates(
                conn,
                now=now,
                host=holder.host,
                agents=agents,
                prefix=prefix,
                limit=CLAIM_BATCH,
                offset=offset,
            )
            for row in page:
                why = _vacant(row, holder, lease_seconds, now) if row["id"] not in skip else None
                if why is not None and locked:
                    again = rows.candidate_locked(conn, row, now=now, host=holder.host)
                    if again is None:  # another transaction holds it, or it is taken
                        why = None
                    elif again is not row:  # read again, locked: judged again
                        row, why = again, _vacant(again, holder, lease_seconds, now)
                if why is not None and accept is not None and not accept(row):
                    why = None
                if why is not None:
                    return row, why
            if len(page) < CLAIM_BATCH:
                return None
            offset += CLAIM_BATCH

    # Looked at first without the write lock: an idle worker polls without blocking engines.
    if first_vacant(locked=False) is None:
        return None
    with run_write(conn):
        found = first_vacant(locked=True)
        if found is None:
            return None  # another worker was quicker
        row, why = found
        takeover = why if row["lease_pid"] is not None else None
        rows.record_claim(conn, row, holder, now, takeover=takeover)
        return Job(
            row["id"], row["agent"], Launch.from_json(row["launch"]), row["status"], takeover
        )


def hand_back(
    conn: LogConnection, run_id: str, *, exit_code: int, worker: Holder | None = None
) -> str | None:
    """The worker's engine on ``run_id`` exited with ``exit_code``: the run is no longer this
    worker's (a finished one keeps its name as who ran it last). The run's status, or ``None``
    when another worker has claimed it since."""
    return rows.hand_back(conn, run_id, exit_code=exit_code, worker=worker or me(), now=time.time())


__all__ = ["Job", "claim_next_run", "enqueue", "hand_back", "submit"]
