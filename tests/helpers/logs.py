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


def synthetic_events(run_id: str, steps: int, *, kill_every: int = 0) -> list[object]:
    """The events of a run of ``steps`` no-op steps as a real engine writes them today
    (``helpers.synthetic_log``), killed after every ``kill_every``-th step, parsed as the
    monitor folds them: for scale tests that need no log file."""
    from helpers.synthetic_log import SyntheticRun, rows
    from steplog.log.logread import Event, payload

    kills = range(kill_every, steps, kill_every) if kill_every else ()
    run = SyntheticRun(run_id, steps, kills=kills, max_steps=steps * 2)
    return [
        Event(i, rid, ts, inc, kind, seq, payload(data))
        for i, (rid, ts, inc, kind, seq, data) in enumerate(rows(run).events, start=1)
    ]


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
