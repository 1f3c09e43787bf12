"""Logs as a test reads them (rows, whole content) and builds them (a run's events, made up)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def query_log(db: Any, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` (``?`` placeholders) on a log file or a PostgreSQL log, as tuples."""
    if isinstance(db, str):
        from steplog.log.pg import connect

        pconn = connect(db)
        try:
            return [tuple(r) for r in pconn.execute(sql, args).fetchall()]
        finally:
            pconn.close()
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def log_bytes(db: Any) -> bytes:
    """The log's whole content, to prove that a refused command wrote nothing: a file's bytes,
    or for a PostgreSQL log every row of every table, in a fixed order."""
    if not isinstance(db, str):
        return Path(db).read_bytes()
    from steplog.log.pg import connect, tables

    conn = connect(db)
    try:
        out = []
        for table in sorted(tables(conn)):
            rows = conn.execute(f'SELECT * FROM "{table}"').fetchall()
            out.append(repr((table, sorted(map(repr, rows)))))
        return "\n".join(out).encode()
    finally:
        conn.close()


def synthetic_events(
    run_id: str, steps: int, *, kill_every: int = 0, step_seconds: float = 0.01
) -> list[object]:
    """Events of a run with ``steps`` committed steps (a kill every ``kill_every``), for scale
    tests."""
    from steplog.log.logread import Event

    events: list[Event] = []
    t, inc = 1_000.0, 1

    def add(
        kind: str,
        seq: int | None = None,
        data: dict[str, object] | None = None,
        incarnation: int | None = None,
    ) -> None:
        events.append(
            Event(
                len(events) + 1,
                run_id,
                t,
                inc if incarnation is None else incarnation,
                kind,
                seq,
                data or {},
            )
        )

    add("run_created", data={"agent": "synthetic", "budget": {"steps": steps * 2}}, incarnation=0)
    add("lease_acquired", data={"pid": 1, "previous_pid": None})
    executions = 0
    for s in range(1, steps + 1):
        executions += 1
        add(
            "step_started",
            s,
            {
                "name": f"step {s}",
                "kind": "call",
                "usage": {"steps": s - 1, "executions": executions},
            },
        )
        t += step_seconds
        if kill_every and s % kill_every == 0:
            inc += 1
            add(
                "lease_acquired",
                data={
                    "pid": inc,
                    "previous_pid": inc - 1,
                    "takeover": f"holder pid {inc - 1} is dead",
                },
            )
            executions += 1
            add(
                "step_started",
                s,
                {
                    "name": f"step {s}",
                    "kind": "call",
                    "usage": {"steps": s - 1, "executions": executions},
                },
            )
            t += step_seconds
        add("step_committed", s, {"usage": {"steps": s, "executions": executions}})
        t += step_seconds / 10
    add(
        "run_finished",
        None,
        {"status": "succeeded", "usage": {"steps": steps, "executions": executions}},
    )
    return events


def takeover_reasons(db: Any, run_ids: str = "%") -> list[str]:
    """Why each lease taken from another engine could be taken (``holder pid N is dead``, ``...
    let its lease expire``), for the runs whose id is ``LIKE run_ids``, in log order."""
    rows = query_log(
        db,
        "SELECT data FROM event WHERE kind = 'lease_acquired' AND run_id LIKE ? ORDER BY id",
        run_ids,
    )
    payloads = [json.loads(data) if isinstance(data, str) else data for (data,) in rows]
    return [str(p["takeover"]) for p in payloads if p.get("takeover")]
