"""Claiming a run: create it or find it, check that resuming it is legitimate, take its lease.

All of it happens in one transaction that holds the run's lock (``db.run_locked``: on SQLite the
file's write lock, on PostgreSQL the lock of this run alone), so two engines racing for one run
are serialised while claims of other runs go on, and every refusal (wrong agent, changed params,
a live lease) rolls back: nothing is written.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from steplog.errors import LeaseHeld, UsageError
from steplog.log.db import LogConnection, LogRow, announce_claimable, for_update, run_locked
from steplog.log.events import EventKind
from steplog.log.integrity import probe
from steplog.log.journal import append_event, dumps
from steplog.log.lease import boot_clock, me, row_vacancy
from steplog.log.location import LogLocation
from steplog.log.runstatus import RunStatus
from steplog.log.status import TERMINAL
from steplog.log.tags import tags_of, write_tags
from steplog.policies import Budget

if TYPE_CHECKING:
    from steplog.log.launch import Launch


class Claimant(Protocol):
    """What a claim asks of the agent (``steplog.runtime.agent.Agent`` is one): its budget, and
    whether it may run with this outbox. The log stays below the runtime and names no agent type."""

    budget: Budget

    def require_outbox(self, outbox: str | None) -> None: ...


RUN_COLUMNS = (
    "id, agent, model, params, status, reason, result, workdir, outbox, limit_steps, limit_tokens, "
    "limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, used_steps, used_tokens, "
    "tokens_estimated, reserved_tokens, used_seconds, used_cost_usd, reserved_cost_usd, "
    "used_retries, step_executions, incarnation, lease_pid, lease_host, lease_boot, "
    "lease_proc_start, lease_expires, lease_expires_boot, cancel_requested, waiting_for, "
    "parent_run_id, parent_step, created_at, finished_at, version, blocked"
)


@dataclass(frozen=True)
class Request:
    """What the caller asked for; ``limits`` are ``Budget`` overrides (``None`` = unchanged)."""

    agent: Claimant
    spec: str
    run_id: str
    db_path: LogLocation
    workdir: Path | None
    outbox: str | None
    params: dict[str, Any]
    limits: dict[str, Any]
    model: str | None
    lease_seconds: float
    killed_at: float | None = None
    """When whoever relaunches this engine killed the previous one (recorded with the claim)."""
    tags: Mapping[str, str] | None = None
    """A new run's tags (``tags.check_tags`` checked them); a resume must not name others."""
    version: str | None = None
    """The version of the agent's code (``docs/versions.md``): recorded on the run."""


@dataclass(frozen=True)
class Claimed:
    row: LogRow
    incarnation: int
    resumed: bool


@dataclass(frozen=True)
class Finished:
    """The run was already terminal (and not reopened): report it, change nothing."""

    row: LogRow


def budget_of(row: LogRow) -> Budget:
    return Budget(
        max_steps=row["limit_steps"],
        max_tokens=row["limit_tokens"],
        max_seconds=row["limit_seconds"],
        max_cost_usd=row["limit_cost_usd"],
        max_retries=row["limit_retries"],
        max_recoveries=row["limit_recoveries"],
    )


def _limits_json(b: Budget) -> dict[str, Any]:
    return {
        "steps": b.max_steps,
        "tokens": b.max_tokens,
        "seconds": b.max_seconds,
        "cost_usd": b.max_cost_usd,
        "retries": b.max_retries,
        "recoveries": b.max_recoveries,
    }


def _exhausted(budget: Budget, row: LogRow) -> bool:
    """Would this budget still stop the run where it gave up?"""
    checks = (
        (budget.max_steps, row["used_steps"]),
        (budget.max_tokens, row["used_tokens"] + row["reserved_tokens"]),
        (budget.max_seconds, row["used_seconds"]),
        (budget.max_cost_usd, row["used_cost_usd"] + row["reserved_cost_usd"]),
        (budget.max_retries, row["used_retries"]),
    )
    return any(limit is not None and used >= limit for limit, used in checks)


def _event(
    conn: LogConnection, run_id: str, now: float, incarnation: int, kind: str, data: dict[str, Any]
) -> None:
    append_event(conn, run_id, incarnation, kind, data, ts=now)


def _select(conn: LogConnection, run_id: str, *, lock: bool = False) -> LogRow | None:
    """The run's row; ``lock``: locked for this transaction first (``db.for_update``), where the
    claim decides on it while the run's engine may be writing it."""
    row: LogRow | None = conn.execute(
        f"SELECT {RUN_COLUMNS} FROM run WHERE id = ?" + (for_update(conn) if lock else ""),
        (run_id,),
    ).fetchone()
    return row


def create_run(
    conn: LogConnection, req: Request, now: float, *, launch: Launch | None = None
) -> LogRow:
    """Insert the run row and its ``run_created`` event (inside the caller's transaction).
    With ``launch`` the run is ``queued`` (``steplog submit``): a worker starts it later that
    way."""
    req.agent.require_outbox(req.outbox)
    b = req.agent.budget.merged(**req.limits)
    workdir = (req.workdir or req.db_path.parent / "runs" / req.run_id).expanduser().resolve()
    conn.execute(
        "INSERT INTO run (id, agent, model, params, workdir, outbox, limit_steps, limit_tokens, "
        "limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, created_at, updated_at, "
        "status, launch, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            req.run_id,
            req.spec,
            req.model,
            dumps(req.params),
            str(workdir),
            req.outbox,
            b.max_steps,
            b.max_tokens,
            b.max_seconds,
            b.max_cost_usd,
            b.max_retries,
            b.max_recoveries,
            now,
            now,
            RunStatus.RUNNING if launch is None else RunStatus.QUEUED,
            None if launch is None else launch.to_json(),
            req.version,
        ),
    )
    _event(
        conn,
        req.run_id,
        now,
        0,
        EventKind.RUN_CREATED,
        {
            "agent": req.spec,
            "params": req.params,
            "model": req.model or "offline",
            "budget": _limits_json(b),
            **({"tags": dict(req.tags)} if req.tags else {}),
            **({"version": req.version} if req.version is not None else {}),
            **(
                {"queued": True, "launch": json.loads(launch.to_json())}
                if launch is not None
                else {}
            ),
        },
    )
    write_tags(conn, req.run_id, req.tags or {})
    if launch is not None:
        announce_claimable(conn, req.run_id)  # an idle worker claims it at once, not at its poll
    created = _select(conn, req.run_id)
    assert created is not None
    return created


def _check_resume(conn: LogConnection, row: LogRow, req: Request) -> None:
    """A resume must be the same run: same agent, same params, same workdir."""
    rid = req.run_id
    if row["agent"] != req.spec:
        raise UsageError(
            f"run {rid} belongs to agent {row['agent']}, not {req.spec}; pass the same agent to "
            "resume it"
        )
    if req.params and req.params != json.loads(row["params"]):
        raise UsageError(
            f"run {rid} was started with params {row['params']}; resume it without --param"
        )
    if req.workdir is not None and str(req.workdir.expanduser().resolve()) != row["workdir"]:
        raise UsageError(f"run {rid} works in {row['workdir']}; omit --workdir to resume it")
    if req.tags:
        recorded = tags_of(conn, [rid])[rid]
        if dict(req.tags) != recorded:
            raise UsageError(
                f"run {rid} was started with tags {recorded or 'none'}; tags are set when a run "
                "starts: resume it without --tag"
            )


def _update_run(
    conn: LogConnection, row: LogRow, req: Request, raised: Budget | None, now: float
) -> None:
    """Apply raised limits (reopening a run that gave up) and a new outbox URL or model."""
    if raised is not None and raised != budget_of(row):
        conn.execute(
            "UPDATE run SET limit_steps = ?, limit_tokens = ?, limit_seconds = ?, limit_cost_usd "
            "= ?, limit_retries = ?, limit_recoveries = ?, status = 'running', reason = NULL, "
            "finished_at = NULL WHERE id = ?",
            (
                raised.max_steps,
                raised.max_tokens,
                raised.max_seconds,
                raised.max_cost_usd,
                raised.max_retries,
                raised.max_recoveries,
                req.run_id,
            ),
        )
        _event(
            conn,
            req.run_id,
            now,
            row["incarnation"],
            EventKind.BUDGET_CHANGED,
            {**_limits_json(raised), "reopened": row["status"] == RunStatus.GAVE_UP},
        )
    if req.outbox and req.outbox != row["outbox"]:
        conn.execute("UPDATE run SET outbox = ? WHERE id = ?", (req.outbox, req.run_id))
    if req.model and req.model != row["model"]:
        conn.execute("UPDATE run SET model = ? WHERE id = ?", (req.model, req.run_id))


def _record_version(
    conn: LogConnection, row: LogRow, req: Request, now: float, incarnation: int
) -> None:
    """Code of another version takes the run up (it was checked to replay the recorded steps
    before the claim, ``steplog.runtime.replaycheck``): the run is on that version now, and a
    ``version_changed`` event (of the new incarnation: the steps it records are the new
    version's) keeps the old one. A refusal recorded before is cleared. A new run's row has
    the version already; a queued one (``submit``) gets it from the engine that starts it."""
    if row["blocked"] is not None:
        conn.execute("UPDATE run SET blocked = NULL WHERE id = ?", (req.run_id,))
    if req.version is None or req.version == row["version"]:
        return
    conn.execute("UPDATE run SET version = ? WHERE id = ?", (req.version, req.run_id))
    if row["incarnation"] > 0 or row["version"] is not None:
        _event(
            conn,
            req.run_id,
            now,
            incarnation,
            EventKind.VERSION_CHANGED,
            {"old": row["version"], "new": req.version},
        )


def _take_lease(conn: LogConnection, row: LogRow, req: Request, now: float, resumed: bool) -> int:
    why = row_vacancy(row, now)
    if why is None:
        until = time.strftime("%H:%M:%S", time.localtime(row["lease_expires"]))
        raise LeaseHeld(
            f"run {req.run_id} is being worked on by pid {row['lease_pid']} on {row['lease_host']} "
            f"(lease until {until}); wait for it or stop that engine"
        )
    holder = me()
    incarnation = int(row["incarnation"]) + 1
    conn.execute(
        "UPDATE run SET incarnation = ?, lease_pid = ?, lease_host = ?, lease_boot = ?, "
        "lease_proc_start = ?, lease_expires = ?, lease_expires_boot = ?, updated_at = ?,"
        # A queued run (submitted, or retried or forked with --no-start) is running once an engine
        # has it.
        " status = CASE WHEN status = 'queued' THEN 'running' ELSE status END,"
        # Reservations of a dead engine stay charged: its model call may have been billed. The
        # amount is an upper bound, not a reported usage, so it counts as estimated.
        " used_tokens = used_tokens + reserved_tokens, tokens_estimated = tokens_estimated + "
        "reserved_tokens, reserved_tokens = 0, used_cost_usd = used_cost_usd + reserved_cost_usd, "
        "reserved_cost_usd = 0 WHERE id = ?",
        (
            incarnation,
            holder.pid,
            holder.host,
            holder.boot,
            holder.proc_start,
            now + req.lease_seconds,
            boot_clock() + req.lease_seconds,
            now,
            req.run_id,
        ),
    )
    _event(
        conn,
        req.run_id,
        now,
        incarnation,
        EventKind.LEASE_ACQUIRED,
        {
            "pid": holder.pid,
            "host": holder.host,
            "resumed": resumed,
            "previous_pid": row["lease_pid"],
            "forfeited_tokens": row["reserved_tokens"],
            "takeover": why if row["lease_pid"] else None,
            **(
                {"killed_at": req.killed_at}
                if req.killed_at is not None and row["lease_pid"]
                else {}
            ),
        },
    )
    return incarnation


def finish_cancelled(conn: LogConnection, row: LogRow, reason: str, now: float) -> None:
    """End a run ``cancelled`` from outside its engine (none holds it): the terminal record.
    Reservations of a dead engine stay charged, as at a takeover. Inside the caller's
    transaction."""
    conn.execute(
        "UPDATE run SET status = 'cancelled', reason = ?, finished_at = ?, updated_at = ?, "
        "lease_pid = NULL, lease_expires = NULL, lease_expires_boot = NULL, waiting_for = NULL, "
        "waiting_since = NULL, reserved_tokens = 0, used_tokens = used_tokens + reserved_tokens, "
        "tokens_estimated = tokens_estimated + reserved_tokens, used_cost_usd = used_cost_usd + "
        "reserved_cost_usd, reserved_cost_usd = 0 WHERE id = ?",
        (reason, now, now, row["id"]),
    )
    _event(
        conn,
        row["id"],
        now,
        row["incarnation"],
        EventKind.RUN_FINISHED,
        {"status": RunStatus.CANCELLED, "reason": reason, "engine": None},
    )


def claim(conn: LogConnection, req: Request) -> Claimed | Finished:
    """Create or find the run and take its lease, in one transaction. Refusals write nothing."""
    now = time.time()
    with run_locked(conn, req.run_id):
        probe(conn, req.db_path, req.run_id)  # a damaged page is refused before anything is written
        row = _select(conn, req.run_id, lock=True)
        resumed = row is not None and row["incarnation"] > 0  # a fork's first engine starts it
        if row is None:
            row = create_run(conn, req, now)
        else:
            _check_resume(conn, row, req)
            raised = (
                budget_of(row).merged(**req.limits)
                if any(v is not None for v in req.limits.values())
                else None
            )
            if row["status"] not in TERMINAL and row["cancel_requested"] is not None:
                # Cancelled while its engine held it, and that engine died before a step boundary.
                finish_cancelled(conn, row, row["cancel_requested"], now)
                done = _select(conn, req.run_id)
                assert done is not None
                return Finished(done)
            if row["status"] in TERMINAL:
                reopen = (
                    row["status"] == RunStatus.GAVE_UP
                    and raised is not None
                    and not _exhausted(raised, row)
                )
                if not reopen:
                    return Finished(row)
            _update_run(
                conn, row, req, raised, now
            )  # rolled back with the rest if the lease is held
        incarnation = _take_lease(conn, row, req, now, resumed)
        _record_version(conn, row, req, now, incarnation)
        fresh = _select(conn, req.run_id)
        assert fresh is not None
    return Claimed(fresh, incarnation, resumed)
