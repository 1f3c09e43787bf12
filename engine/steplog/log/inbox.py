"""The approvals inbox: every run waiting for a signal, oldest wait first, with what it waits for
and what it has to show (the result of its last step before the wait: what a person is asked to
approve). Read-only, for the monitor's inbox (``steplog_gui.views.approvals``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steplog.log.db import LogConnection, has_column
from steplog.log.runstatus import RunStatus
from steplog.log.steps import result_of


@dataclass(frozen=True)
class Waiting:
    """One run waiting for signal ``signal`` since ``since`` (epoch seconds)."""

    run_id: str
    agent: str
    signal: str
    since: float | None
    step: str | None
    """The name of the step before the wait, if any."""
    shows: Any
    """That step's recorded result (JSON value; ``None`` when there is none)."""


def waiting_for_signals(conn: LogConnection, *, limit: int = 500) -> list[Waiting]:
    """Runs in status ``waiting`` on a signal (``run.wait_for``), the longest waiting first."""
    if not has_column(conn, "run", "waiting_for"):
        return []  # a log from before run control has no waits
    rows = conn.execute(
        "SELECT id, agent, waiting_for, waiting_since FROM run"
        " WHERE status = ? AND waiting_for IS NOT NULL"
        " ORDER BY waiting_since, id LIMIT ?",
        (RunStatus.WAITING, limit),
    ).fetchall()
    out = []
    for run_id, agent, signal, since in rows:
        last = conn.execute(
            "SELECT name, result FROM step WHERE run_id = ? AND status = 'committed'"
            " ORDER BY seq DESC LIMIT 1",
            (run_id,),
        ).fetchone()
        name, shows = (last[0], result_of(last[1])) if last is not None else (None, None)
        out.append(Waiting(run_id, agent, signal, since, name, shows))
    return out


def read_inbox(location: Any) -> list[Waiting]:
    """``waiting_for_signals`` of the log at ``location`` (opened read-only and closed again)."""
    from steplog.log.db import open_readonly

    conn = open_readonly(location, one_shot=True)
    try:
        return waiting_for_signals(conn)
    finally:
        conn.close()
