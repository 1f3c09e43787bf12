"""Reading runs back: the status JSON of CONTRACT.md, from the log, read-only.

Import-light on purpose (the engine imports ``TERMINAL`` and ``outcome_error`` from here).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import Cancelled, GaveUp, RunFailed, RunStopped, UnknownRun

if TYPE_CHECKING:
    from .db import LogConnection
    from .location import LogLocation

STATUSES = ("queued", "running", "waiting", "succeeded", "gave_up", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "gave_up", "failed", "cancelled"})
ACTIVE = frozenset({"queued", "running", "waiting"})
"""Not finished: an engine may work on these (resume them with the same command)."""


def outcome_error(run_id: str, status: str, reason: str | None) -> RunStopped:
    """The exception that stands for a terminal non-success status."""
    cls = {"gave_up": GaveUp, "cancelled": Cancelled}.get(status, RunFailed)
    return cls(reason or status, run_id=run_id)


_SELECT = (
    "SELECT id, agent, model, status, reason, result, workdir, outbox, params, used_steps, step_executions,"
    " incarnation, limit_steps, limit_tokens, limit_seconds, limit_cost_usd, used_tokens + reserved_tokens,"
    " tokens_estimated, used_seconds, used_cost_usd + reserved_cost_usd, used_retries, limit_retries,"
    " created_at, updated_at, finished_at, lease_pid, lease_host, {control} FROM run"
)
_CONTROL = "parent_run_id, parent_step, waiting_for, waiting_since"
_NO_CONTROL = "NULL, NULL, NULL, NULL"  # a schema-1 log read without migrating it (read-only)


def _select_sql(conn: LogConnection) -> str:
    from .db import has_column

    has_control = has_column(conn, "run", "parent_run_id")
    return _SELECT.format(control=_CONTROL if has_control else _NO_CONTROL)


def _as_status(r: tuple[Any, ...]) -> dict[str, Any]:
    (rid, agent, model, status, reason, result, workdir, outbox, params, steps, executions, incarnation,
     l_steps, l_tokens, l_seconds, l_cost, tokens, tokens_est, seconds, cost, retries, l_retries,
     created, updated, finished, lease_pid, lease_host, parent, parent_step, waiting_for, waiting_since) = r
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
    }
    if parent is not None:
        out["forked_from"] = {"run_id": parent, "at_step": parent_step}
    if status == "waiting":
        out["waiting_for"] = waiting_for
        out["waiting_since"] = waiting_since
    return out


def _engine(status: str, pid: int | None, host: str | None) -> str:
    """Who is working on the run: "live", "gone" (its engine died: run the same command to
    resume), "none" (no engine holds it), or "remote" (another host; only its lease says)."""
    if status in TERMINAL or pid is None:
        return "none"
    import socket

    if host != socket.gethostname():
        return "remote"
    from .lease import process_alive

    return "live" if process_alive(pid) else "gone"


def run_status(conn: LogConnection, run_id: str, *, db: LogLocation | None = None) -> dict[str, Any]:
    row = conn.execute(_select_sql(conn) + " WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        where = f" in {db}" if db else ""
        raise UnknownRun(f"no run {run_id!r}{where}; `steplog runs` lists the runs there")
    return _as_status(row)


def all_runs(conn: LogConnection) -> list[dict[str, Any]]:
    """Every run, newest first."""
    return [_as_status(r) for r in conn.execute(_select_sql(conn) + " ORDER BY created_at DESC, id DESC")]
