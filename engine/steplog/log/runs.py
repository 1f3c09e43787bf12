"""The run rows that run control writes from outside an engine: cancel, signal, retry, fork, queue.

``steplog.control.commands`` decides (is the run finished, does a live engine hold it, may it be
retried); the functions here do what it decided, each inside the caller's transaction
(``db.run_locked``), each change with its event. None of them checks a policy or refuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steplog.log.claim import finish_cancelled
from steplog.log.db import LogConnection, LogRow, announce_claimable, for_update, named_rows
from steplog.log.events import EventKind
from steplog.log.journal import append_event, dumps
from steplog.log.launch import Launch
from steplog.log.status import TERMINAL
from steplog.log.steps import copy_committed_steps, copy_edited_step, result_of, step_record
from steplog.log.streams import copy_for_fork
from steplog.log.tags import copy_tags
from steplog.policies import Budget


def _event(
    conn: LogConnection,
    run: LogRow,
    now: float,
    kind: str,
    data: dict[str, Any],
    seq: int | None = None,
) -> None:
    append_event(conn, run["id"], run["incarnation"], kind, data, seq=seq, ts=now)


def run_to_change(conn: LogConnection, run_id: str) -> LogRow | None:
    """The whole run row (columns by name), locked for the caller's transaction
    (``db.for_update``), or ``None``."""
    with named_rows(conn):
        row: LogRow | None = conn.execute(
            "SELECT * FROM run WHERE id = ?" + for_update(conn), (run_id,)
        ).fetchone()
    return row


def run_exists(conn: LogConnection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM run WHERE id = ?", (run_id,)).fetchone() is not None


def status_of(conn: LogConnection, run_id: str) -> str:
    """The status of a run that exists."""
    return str(conn.execute("SELECT status FROM run WHERE id = ?", (run_id,)).fetchone()[0])


def status_counts(conn: LogConnection, run_ids: list[str]) -> dict[str, int]:
    """How many of these runs are in each status."""
    counts: dict[str, int] = {}
    for (status,) in conn.execute(f"SELECT status FROM run WHERE id IN {_marks(run_ids)}", run_ids):
        counts[status] = counts.get(status, 0) + 1
    return counts


def count_ended(conn: LogConnection, run_ids: list[str]) -> int:
    """How many of these runs are finished (``status.TERMINAL``)."""
    return int(
        conn.execute(
            f"SELECT count(*) FROM run WHERE id IN {_marks(run_ids)} AND status IN "
            f"{_marks(TERMINAL)}",
            (*run_ids, *TERMINAL),
        ).fetchone()[0]
    )


def _marks(values: Any) -> str:
    return f"({', '.join('?' for _ in values)})"


# -- cancel ----------------------------------------------------------------------------------


def request_cancel(conn: LogConnection, run: LogRow, reason: str, now: float) -> None:
    """Ask the live engine holding ``run`` to stop (it looks at each write and heartbeat)."""
    conn.execute(
        "UPDATE run SET cancel_requested = ?, updated_at = ? WHERE id = ?", (reason, now, run["id"])
    )
    _event(
        conn,
        run,
        now,
        EventKind.CANCEL_REQUESTED,
        {"reason": reason, "engine_pid": run["lease_pid"]},
    )


def cancel_now(conn: LogConnection, run: LogRow, reason: str, now: float) -> None:
    """End ``run``, which no live engine holds, ``cancelled`` (the terminal record)."""
    conn.execute("UPDATE run SET cancel_requested = ? WHERE id = ?", (reason, run["id"]))
    finish_cancelled(conn, run, reason, now)


# -- signal ----------------------------------------------------------------------------------


def signal_with_key(conn: LogConnection, run_id: str, key: str) -> int | None:
    """The id of the signal sent to the run with idempotency ``key`` before, if any."""
    row = conn.execute(
        "SELECT id FROM signal WHERE run_id = ? AND key = ?", (run_id, key)
    ).fetchone()
    return int(row[0]) if row is not None else None


def store_signal(
    conn: LogConnection, run: LogRow, name: str, data_json: str, key: str | None, now: float
) -> int:
    """Store signal ``name`` for the run's next ``wait_for(name)``, with its event; its id."""
    signal_id = int(
        conn.execute(
            "INSERT INTO signal (run_id, name, data, key, sent_at) VALUES (?, ?, ?, ?, ?) "
            "RETURNING id",
            (run["id"], name, data_json, key, now),
        ).fetchone()[0]
    )
    _event(
        conn,
        run,
        now,
        EventKind.SIGNAL_SENT,
        {
            "signal": name,
            "signal_id": signal_id,
            "bytes": len(data_json.encode()),
            **({"key": key} if key is not None else {}),
        },
    )
    return signal_id


# -- retry -----------------------------------------------------------------------------------


def recorded_failure(conn: LogConnection, run_id: str) -> str | None:
    """How the run failed, as its last ``run_finished`` event records it (older logs: ``None``)."""
    row = conn.execute(
        "SELECT data FROM event WHERE run_id = ? AND kind = ? ORDER BY id DESC LIMIT 1",
        (run_id, EventKind.RUN_FINISHED),
    ).fetchone()
    recorded = json.loads(row[0]).get("failure") if row else None
    return recorded if isinstance(recorded, str) else None


def set_going_again(
    conn: LogConnection,
    run: LogRow,
    now: float,
    *,
    launch: Launch | None,
    details: dict[str, Any],
) -> list[int]:
    """A failed run ``queued`` again from its failed step: that step's row goes (attempts and
    recoveries start from zero; its history stays in the events), the run's end is cleared, and
    a ``retried`` event records ``details`` with the steps it removed. Those steps' numbers."""
    run_id = run["id"]
    failed = [
        int(r[0])
        for r in conn.execute(
            "SELECT seq FROM step WHERE run_id = ? AND status = 'failed'", (run_id,)
        )
    ]
    conn.execute("DELETE FROM step WHERE run_id = ? AND status = 'failed'", (run_id,))
    conn.execute(
        "UPDATE run SET reason = NULL, result = NULL, finished_at = NULL, used_retries = 0, "
        "cancel_requested = NULL, updated_at = ? WHERE id = ?",
        (now, run_id),
    )
    enqueue(conn, run_id, launch)
    _event(conn, run, now, EventKind.RETRIED, {**details, "steps": failed, "queued": True})
    return failed


def enqueue(conn: LogConnection, run_id: str, launch: Launch | None) -> None:
    """Mark a run no engine has taken yet as ``queued`` (``retry``/``fork --no-start``), with
    how a worker starts it; inside the caller's transaction."""
    conn.execute(
        "UPDATE run SET status = 'queued', launch = COALESCE(?, launch) WHERE id = ?",
        (None if launch is None else launch.to_json(), run_id),
    )
    announce_claimable(conn, run_id)


# -- fork ------------------------------------------------------------------------------------


def create_fork(
    conn: LogConnection,
    parent: LogRow,
    at_step: int,
    new_id: str,
    *,
    params: dict[str, Any],
    budget: Budget,
    workdir: Path,
    outbox: str | None,
    model: str | None,
    now: float,
    edited_result: str | None = None,
) -> int:
    """Insert run ``new_id``, a fork of ``parent`` at ``at_step``: its steps ``1..at_step-1``
    copied as committed (results and decisions, never effects), its usage the sum of theirs, its
    ``run_created`` and ``step_copied`` events. How many steps were copied.

    ``edited_result`` (JSON text): step ``at_step`` is copied too, committed with this result
    instead of the parent's (``copy_edited_step``), and its ``step_copied`` event says so and
    keeps the parent's result; the fork runs from the step after it."""
    pid = parent["id"]
    sums = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(tokens_in + tokens_out), 0), COALESCE(SUM(tokens_estimated "
        "* (tokens_in + tokens_out)), 0), COALESCE(SUM(cost_usd), 0) FROM step WHERE run_id = ? "
        "AND seq < ?",
        (pid, at_step),
    ).fetchone()
    copied, tokens, estimated, cost = int(sums[0]), int(sums[1]), int(sums[2]), float(sums[3])
    edited = edited_result is not None
    recorded = copied + edited  # the edited step is a step of the fork, committed, never run
    conn.execute(
        "INSERT INTO run (id, agent, model, params, workdir, outbox, limit_steps, limit_tokens, "
        "limit_seconds, limit_cost_usd, limit_retries, limit_recoveries, used_steps, used_tokens, "
        "tokens_estimated, used_cost_usd, step_executions, created_at, updated_at, parent_run_id, "
        "parent_step) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            new_id,
            parent["agent"],
            model,
            dumps(params),
            str(workdir),
            outbox,
            budget.max_steps,
            budget.max_tokens,
            budget.max_seconds,
            budget.max_cost_usd,
            budget.max_retries,
            budget.max_recoveries,
            recorded,
            tokens,
            estimated,
            cost,
            recorded,
            now,
            now,
            pid,
            at_step,
        ),
    )
    copy_committed_steps(conn, pid, new_id, at_step)
    copy_for_fork(conn, pid, new_id, at_step)
    copy_tags(conn, pid, new_id)  # a fork is found by its parent's tags
    original: Any = None
    if edited_result is not None:
        copy_edited_step(conn, pid, new_id, at_step, edited_result)
        parents = step_record(conn, pid, at_step)
        original = result_of(parents.result) if parents is not None else None
    row = run_to_change(conn, new_id)
    assert row is not None
    first, last = conn.execute(
        "SELECT MIN(started_at), MAX(COALESCE(finished_at, started_at)) FROM step WHERE run_id = ?",
        (new_id,),
    ).fetchone()
    _event(
        conn,
        row,
        now,
        EventKind.RUN_CREATED,
        {
            "copied_span": [first, last] if copied else None,
            "agent": parent["agent"],
            "params": params,
            "model": model or "offline",
            "budget": {
                "steps": budget.max_steps,
                "tokens": budget.max_tokens,
                "seconds": budget.max_seconds,
                "cost_usd": budget.max_cost_usd,
                "retries": budget.max_retries,
                "recoveries": budget.max_recoveries,
            },
            "forked_from": {"run_id": pid, "at_step": at_step}
            | ({"edited_step": at_step} if edited else {}),
        },
    )
    for seq, name, kind, started, finished in conn.execute(
        "SELECT seq, name, kind, started_at, finished_at FROM step WHERE run_id = ? ORDER BY seq",
        (new_id,),
    ):
        _event(
            conn,
            row,
            now,
            EventKind.STEP_COPIED,
            {
                "name": name,
                "kind": kind,
                "from_run": pid,
                "started_at": started,
                "finished_at": finished,
            }
            | ({"edited": True, "original_result": original} if edited and seq == at_step else {}),
            seq=seq,
        )
    return copied
