"""A run's step rows, read: what the verdict, run control and the readers ask of the ``step`` table.

The engine writes step rows inside its fenced transactions (``journal``); reading them back is
here, so a step row's shape is known in one module.
"""

from __future__ import annotations

from steplog.log.db import LogConnection

MAX_SEQ = 2**63 - 1
"""The largest integer the log stores (SQLite, PostgreSQL ``bigint``): no step number is above."""


def steps_in_order(conn: LogConnection, run_id: str) -> list[tuple[int, str, str]]:
    """``(seq, name, kind)`` of each of the run's steps, in step order."""
    return [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in conn.execute(
            "SELECT seq, name, kind FROM step WHERE run_id = ? ORDER BY seq", (run_id,)
        )
    ]


def unfinished_steps(conn: LogConnection, run_id: str) -> list[int]:
    """The run's steps that are not committed (started, decided, failed), by number."""
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT seq FROM step WHERE run_id = ? AND status <> 'committed'", (run_id,)
        ).fetchall()
    ]


def contiguous_committed(conn: LogConnection, run_id: str, before: int) -> int:
    """How many of steps ``1, 2, ...`` (below ``before``) are committed without a gap. A
    ``before`` past any step number the log can hold reads as that limit (it would not bind)."""
    n = 0
    for (seq,) in conn.execute(
        "SELECT seq FROM step WHERE run_id = ? AND seq < ? AND status = 'committed' ORDER BY seq",
        (run_id, min(before, MAX_SEQ)),
    ):
        if seq != n + 1:
            break
        n = seq
    return n
