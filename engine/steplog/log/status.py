"""Reading runs back: the ``steplog status --json`` object, from the log, read-only.

Import-light on purpose (the engine imports ``TERMINAL`` and ``outcome_error`` from here).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from steplog.errors import Cancelled, GaveUp, RunFailed, RunStopped, UnknownRun
from steplog.log.runstatus import ACTIVE, TERMINAL, RunStatus

if TYPE_CHECKING:
    from steplog.log.db import LogConnection
    from steplog.log.location import LogLocation

# The statuses themselves are defined in ``runstatus``; re-exported for the readers of this module.
__all__ = [
    "ACTIVE",
    "TERMINAL",
    "RunStatus",
    "all_runs",
    "outcome_error",
    "run_status",
    "select_statuses",
    "with_tags",
]


def outcome_error(run_id: str, status: str, reason: str | None) -> RunStopped:
    """The exception that stands for a terminal non-success status."""
    by_status: dict[str, type[RunStopped]] = {
        RunStatus.GAVE_UP: GaveUp,
        RunStatus.CANCELLED: Cancelled,
    }
    cls = by_status.get(status, RunFailed)
    return cls(reason or status, run_id=run_id)


_SELECT = (
    "SELECT id, agent, model, status, reason, result, workdir, outbox, params, used_steps, "
    "step_executions, incarnation, limit_steps, limit_tokens, limit_seconds, limit_cost_usd, "
    "used_tokens + reserved_tokens, tokens_estimated, used_seconds, used_cost_usd + "
    "reserved_cost_usd, used_retries, limit_retries, created_at, updated_at, finished_at, "
    "lease_pid, lease_host, {control}, {queue}, {versions}, {waits} FROM run"
)
_CONTROL = "parent_run_id, parent_step, waiting_for, waiting_since"
_NO_CONTROL = "NULL, NULL, NULL, NULL"  # a schema-1 log read without migrating it (read-only)
_QUEUE = "worker_host, worker_pid"
_NO_QUEUE = "NULL, NULL"  # a schema-1 or -2 log read without migrating it
_VERSIONS = "version, blocked"
_NO_VERSIONS = "NULL, NULL"  # a log from before schema 8 read without migrating it
_WAITS = "waiting_until, waiting_topic"
_NO_WAITS = "NULL, NULL"  # a log from before schema 9 read without migrating it


def _select_sql(conn: LogConnection) -> str:
    from steplog.log.db import has_column

    return _SELECT.format(
        control=_CONTROL if has_column(conn, "run", "parent_run_id") else _NO_CONTROL,
        queue=_QUEUE if has_column(conn, "run", "worker_pid") else _NO_QUEUE,
        versions=_VERSIONS if has_column(conn, "run", "version") else _NO_VERSIONS,
        waits=_WAITS if has_column(conn, "run", "waiting_topic") else _NO_WAITS,
    )


def _as_status(r: tuple[Any, ...]) -> dict[str, Any]:
    (
        rid,
        agent,
        model,
        status,
        reason,
        result,
        workdir,
        outbox,
        params,
        steps,
        executions,
        incarnation,
        l_steps,
        l_tokens,
        l_seconds,
        l_cost,
        tokens,
        tokens_est,
        seconds,
        cost,
        retries,
        l_retries,
        created,
        updated,
        finished,
        lease_pid,
        lease_host,
        parent,
        parent_step,
        waiting_for,
        waiting_since,
        worker_host,
        worker_pid,
        version,
        blocked,
        waiting_until,
        waiting_topic,
    ) = r
    out: dict[str, Any] = {
        "run_id": rid,
        "agent": agent,
        "model": model or "offline",
        "status": status,
        "reason": reason,
        "result": json.loads(result) if result else None,
        "steps_committed": steps,
        "step_executions": executions,
        "incarnations": incarnation,
        "budget": {
            "steps": {"used": steps, "limit": l_steps},
            "tokens": {"used": tokens, "limit": l_tokens, "estimated": tokens_est},
            "seconds": {"used": round(seconds, 3), "limit": l_seconds},
            "cost_usd": {"used": round(cost, 9), "limit": l_cost},
            "retries": {"used": retries, "limit": l_retries},
        },
        "params": json.loads(params),
        "workdir": workdir,
        "outbox": outbox,
        "created_at": created,
        "updated_at": updated,
        "finished_at": finished,
        "lease_pid": lease_pid,
        "engine": _engine(status, lease_pid, lease_host),
        # The worker (steplog worker) that has the run, or for a finished run the one that ran it
        # last.
        "worker": {"host": worker_host, "pid": worker_pid} if worker_pid is not None else None,
        # The version of the code that last worked on the run (docs/versions.md).
        "version": version,
    }
    if blocked is not None and status not in TERMINAL:
        out["blocked"] = json.loads(blocked)
    if parent is not None:
        out["forked_from"] = {"run_id": parent, "at_step": parent_step}
    if status == RunStatus.WAITING:
        out["waiting_for"] = waiting_for
        out["waiting_since"] = waiting_since
        if waiting_topic is not None:
            out["waiting_for_topic"] = waiting_topic
        elif waiting_for is None and waiting_until is not None:
            out["sleeping_until"] = datetime.fromtimestamp(waiting_until, UTC).isoformat(
                timespec="milliseconds"
            )
    return out


def _engine(status: str, pid: int | None, host: str | None) -> str:
    """Who is working on the run (``lease.holder_seen``); "none" once it has finished."""
    if status in TERMINAL:
        return "none"
    from steplog.log.lease import holder_seen

    return holder_seen(pid, host)


def run_status(
    conn: LogConnection, run_id: str, *, db: LogLocation | None = None
) -> dict[str, Any]:
    row = conn.execute(_select_sql(conn) + " WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        where = f" in {db}" if db else ""
        raise UnknownRun(
            f"no run {run_id!r}{where}{_pruned(conn, run_id)}; `steplog runs` lists the runs there"
        )
    return with_tags(conn, [_as_status(row)])[0]


def _pruned(conn: LogConnection, run_id: str) -> str:
    """ ", pruned at T (archived to F: `steplog import F` brings it back)" when ``steplog prune``
    removed it."""
    try:
        row = conn.execute(
            "SELECT pruned_at, archive FROM pruned WHERE run_id = ? AND state = 'done' ORDER BY "
            "id DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    except sqlite3.OperationalError:
        return ""  # a log from before pruning existed
    if row is None:
        return ""
    import time

    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row[0]))
    kept = f" (archived to {row[1]}: `steplog import {row[1]}` brings it back)" if row[1] else ""
    return f": it was pruned at {when}{kept}"


def all_runs(conn: LogConnection) -> list[dict[str, Any]]:
    """Every run, newest first."""
    return with_tags(
        conn,
        [
            _as_status(r)
            for r in conn.execute(_select_sql(conn) + " ORDER BY created_at DESC, id DESC")
        ],
    )


def select_statuses(
    conn: LogConnection, where: str, args: tuple[Any, ...], tail: str = ""
) -> list[dict[str, Any]]:
    """The status objects of the runs ``WHERE where`` (``tail``: ORDER BY/LIMIT), tags in."""
    return with_tags(
        conn,
        [_as_status(r) for r in conn.execute(f"{_select_sql(conn)} WHERE {where} {tail}", args)],
    )


def with_tags(conn: LogConnection, statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``statuses`` each with its run's ``"tags"`` (``{}``: none), read in one query a page."""
    from steplog.log.tags import tags_of

    tags = tags_of(conn, [s["run_id"] for s in statuses])
    for s in statuses:
        s["tags"] = tags[s["run_id"]]
    return statuses
