"""A log of many finished runs, written in seconds: the runs list's benchmarks and tests.

A schedule every minute makes 10,000 runs in a week; running that many engines would take
hours. ``write_runs`` writes what the engine leaves of a short finished run (its ``run`` row,
its tags, a ``run_created`` and a ``run_finished`` event) for ``n`` runs one ``spacing`` apart,
on a SQLite file or a PostgreSQL log alike, through the log's own connection. Which agent,
status and tags run ``i`` has is a pure function of ``i`` (``run_shape``), so a test can say how
many a filter must find.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from steplog.log.db import open_log
from steplog.log.location import LogLocation

AGENTS = ("triage", "billing", "summarise")
STATUSES = ("succeeded", "succeeded", "succeeded", "failed", "gave_up", "cancelled")
TEAMS = ("support", "sales", "ops", "research")
T0 = 1_780_000_000.0
"""When run 0 was created (2026-05-28): well in the past, so a new run sorts above them all."""


@dataclass(frozen=True)
class Shape:
    run_id: str
    agent: str
    status: str
    tags: dict[str, str]
    created_at: float
    reason: str | None


def run_shape(i: int, *, spacing: float = 60.0, prefix: str = "run") -> Shape:
    status = STATUSES[i % len(STATUSES)]
    return Shape(
        run_id=f"{prefix}-{i:06d}",
        agent=AGENTS[i % len(AGENTS)],
        status=status,
        tags={"team": TEAMS[i % len(TEAMS)], "batch": str(i // 1000)},
        created_at=T0 + i * spacing,
        reason={"failed": "step 2 failed: timeout talking to crm", "gave_up": "budget"}.get(status),
    )


def count_where(n: int, **want: Any) -> int:
    """How many of runs ``0..n-1`` have every attribute in ``want`` (``team=`` for the tag)."""
    hits = 0
    for i in range(n):
        s = run_shape(i)
        got = {"agent": s.agent, "status": s.status, "team": s.tags["team"]}
        hits += all(got[k] == v for k, v in want.items())
    return hits


_BATCH = 500
_RUN_COLUMNS = (
    "id", "agent", "params", "status", "reason", "used_steps", "step_executions", "used_tokens",
    "used_cost_usd", "used_seconds", "incarnation", "created_at", "updated_at", "finished_at",
)  # fmt: skip
_USED = (3, 3, 1200, 0.0012, 30.0)
"""What each run used: steps, step executions, tokens, cost, seconds (``_finished`` says the
same)."""


def write_runs(
    db: LogLocation, n: int, *, spacing: float = 60.0, prefix: str = "run", start: int = 0
) -> None:
    """Add runs ``start..start+n-1`` (``run_shape``) to log ``db`` (created if new)."""
    conn = open_log(db, synchronous="NORMAL")
    try:
        for first in range(start, start + n, _BATCH):
            shapes = [
                run_shape(i, spacing=spacing, prefix=prefix)
                for i in range(first, min(first + _BATCH, start + n))
            ]
            conn.execute("BEGIN IMMEDIATE")
            _insert(
                conn,
                "run",
                _RUN_COLUMNS,
                [
                    (s.run_id, s.agent, json.dumps({"n": 3}), s.status, s.reason, *_USED, 1)
                    + (s.created_at, s.created_at + 30, s.created_at + 30)
                    for s in shapes
                ],
            )
            _insert(
                conn,
                "run_tag",
                ("run_id", "key", "value"),
                [(s.run_id, k, v) for s in shapes for k, v in s.tags.items()],
            )
            _insert(
                conn,
                "event",
                ("run_id", "ts", "incarnation", "kind", "data"),
                [
                    row
                    for s in shapes
                    for row in (
                        (s.run_id, s.created_at, 0, "run_created", _created(s)),
                        (s.run_id, s.created_at + 30, 1, "run_finished", _finished(s)),
                    )
                ],
            )
            conn.execute("COMMIT")
    finally:
        conn.close()


def _created(s: Shape) -> str:
    return json.dumps(
        {
            "agent": s.agent,
            "params": {"n": 3},
            "model": "offline",
            "budget": {"steps": None, "tokens": None, "seconds": None, "cost_usd": None},
            "tags": s.tags,
        }
    )


def _finished(s: Shape) -> str:
    usage = {"steps": 3, "executions": 3, "tokens": 1200, "cost_usd": 0.0012, "seconds": 30.0}
    return json.dumps({"status": s.status, "reason": s.reason, "usage": usage})


def _insert(conn: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    marks = "(" + ", ".join("?" for _ in columns) + ")"
    conn.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join(marks for _ in rows)}",
        tuple(v for row in rows for v in row),
    )
