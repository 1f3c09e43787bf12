"""A step row: its fields, named once, and the reads of the ``step`` table.

``StepRecord`` is the ``step`` table's row, field for field in column order (``STEP_COLUMNS``):
the engine reads it to resume a step an earlier engine left unfinished (``load_steps``), the
monitor's detail pane reads it (``reader.StepDetail`` adds the step's effects), run control copies
it for a fork (``runs.create_fork``), and ``tables.StepRow`` types it for SQLModel readers; a test
holds all of them to the schema. The engine writes step rows inside its fenced transactions
(``journal``); everything that reads them asks here.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from steplog.log.connection import LogConnection

MAX_SEQ = 2**63 - 1
"""The largest integer the log stores (SQLite, PostgreSQL ``bigint``): no step number is above."""

WAIT_KINDS = frozenset({"wait", "sleep", "recv"})
"""The kinds of step that wait (``run.wait_for``, ``run.sleep``, ``run.recv``): one taken up again
by a later engine redoes nothing."""


@dataclass(frozen=True)
class StepRecord:
    """One row of the ``step`` table."""

    run_id: str
    seq: int
    name: str
    kind: str
    status: str
    """``running``, ``committed`` or ``failed``."""
    phase: str
    """``started``, ``decided``, ``acting``, ``waiting`` or ``recorded``."""
    decision: str | None
    """The model's answer (JSON), recorded before anything acts on it."""
    result: str | None
    """The step's result (JSON), once committed."""
    error: str | None
    attempts: int
    recoveries: int
    """Engines that died inside this step (a poison pill past the run's limit)."""
    tokens_in: int
    tokens_out: int
    tokens_cached: int
    tokens_estimated: bool
    """The token counts are estimates, not the provider's."""
    cost_usd: float
    started_at: float
    finished_at: float | None
    incarnation: int
    """The engine that last worked on it."""
    args_hash: str | None = None
    """The hash of its name, kind and arguments (``steplog.runtime.callhash``); ``None`` for a
    step recorded before schema 8 (checked on replay by name and kind only)."""

    @classmethod
    def from_row(cls, row: Any) -> StepRecord:
        """From a row of ``SELECT {STEP_SELECT}`` (read by position)."""
        values = list(row[: len(STEP_COLUMNS)])
        values[_ESTIMATED] = bool(values[_ESTIMATED])
        return cls(*values)


STEP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepRecord))
"""The ``step`` table's columns, in its order."""
STEP_SELECT = ", ".join(STEP_COLUMNS)
_ESTIMATED = STEP_COLUMNS.index("tokens_estimated")


class Committed(NamedTuple):
    """A step the log has committed: on resume its recorded result is returned, nothing runs.

    Kept to the five columns replay needs and built as a plain tuple: a resume loads every step
    of the run, and at 100,000 steps the full record of each was most of the time to resume."""

    seq: int
    name: str
    kind: str
    result: str | None
    args_hash: str | None = None
    """As ``StepRecord.args_hash``."""


_SCAN = json.JSONDecoder().raw_decode


def result_of(text: str | None) -> Any:
    """A recorded step result (the log's JSON text; ``None``: no result) as the value a replay
    returns. The log's one encoder writes compact JSON, so the C scanner is called directly:
    ``json.loads`` first matches whitespace with a regex on both sides, half its cost on a
    no-op step's result, and a resume replays every step of the run."""
    if not text:
        return None
    try:
        value, end = _SCAN(text)
    except ValueError:
        return json.loads(text)  # leading space or not JSON: json's own answer, or its error
    return value if end == len(text) else json.loads(text)


def as_stored(name: str) -> str:
    """A step's name as a PostgreSQL log reads it back: a NUL character as ``pg.NUL_STAND_IN``
    (its text cannot hold one; a SQLite log keeps the name as it is). A resumed run compares its
    code's names with the recorded ones in this form too."""
    if "\x00" not in name:
        return name
    from steplog.log.pg import NUL_STAND_IN

    return name.replace("\x00", NUL_STAND_IN)


def load_steps(conn: LogConnection, run_id: str) -> dict[int, Committed | StepRecord]:
    """Every step of the run in two queries (never one per step): the committed ones as
    ``Committed``, the few others (started, decided, failed) as full ``StepRecord``s."""
    make = functools.partial(tuple.__new__, Committed)  # Committed._make without its Python frame
    steps: dict[int, Committed | StepRecord] = {
        r[0]: make(r)
        for r in conn.execute(
            "SELECT seq, name, kind, result, args_hash FROM step WHERE run_id = ? AND status = "
            "'committed'",
            (run_id,),
        )
    }
    for r in conn.execute(
        f"SELECT {STEP_SELECT} FROM step WHERE run_id = ? AND status != 'committed'", (run_id,)
    ):
        record = StepRecord.from_row(r)
        steps[record.seq] = record
    return steps


def step_record(conn: LogConnection, run_id: str, seq: int) -> StepRecord | None:
    """Step ``seq`` of the run, or ``None``."""
    row = conn.execute(
        f"SELECT {STEP_SELECT} FROM step WHERE run_id = ? AND seq = ?", (run_id, seq)
    ).fetchone()
    return StepRecord.from_row(row) if row is not None else None


def step_name(conn: LogConnection, run_id: str, seq: int) -> str | None:
    """The name of step ``seq`` of the run, or ``None``."""
    row = conn.execute(
        "SELECT name FROM step WHERE run_id = ? AND seq = ?", (run_id, seq)
    ).fetchone()
    return str(row[0]) if row is not None else None


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


_FORK_COPY = {
    "run_id": "?",
    "status": "'committed'",
    "phase": "'recorded'",
    "error": "NULL",
    "incarnation": "0",
}
"""What a fork's copy of a committed step changes (its run, and no engine has worked on it)."""


def copy_committed_steps(conn: LogConnection, parent: str, child: str, before: int) -> None:
    """Copy ``parent``'s steps below ``before`` into run ``child`` as committed, every other
    column as it is (decisions and results; effects are not steps and are never copied)."""
    picks = ", ".join(_FORK_COPY.get(c, c) for c in STEP_COLUMNS)
    conn.execute(
        f"INSERT INTO step ({STEP_SELECT}) SELECT {picks} FROM step WHERE run_id = ? AND seq < ?"
        " ORDER BY seq",
        (child, parent, before),
    )


def copy_edited_step(conn: LogConnection, parent: str, child: str, seq: int, result: str) -> None:
    """Record ``parent``'s step ``seq`` in run ``child`` as committed with ``result`` (JSON text)
    in place of whatever it recorded: a fork with an edit (``steplog fork --set-result``). Its
    usage is zero (the fork spent nothing on it); a chat step's decision is the edited answer."""
    picks = ", ".join(
        {
            **_FORK_COPY,
            "result": "?",
            "decision": "CASE WHEN kind = 'chat' THEN ? ELSE NULL END",
            "tokens_in": "0",
            "tokens_out": "0",
            "tokens_cached": "0",
            "tokens_estimated": "0",
            "cost_usd": "0",
            "attempts": "0",
            "recoveries": "0",
        }.get(c, c)
        for c in STEP_COLUMNS
    )
    conn.execute(
        f"INSERT INTO step ({STEP_SELECT}) SELECT {picks} FROM step WHERE run_id = ? AND seq = ?",
        (child, result, result, parent, seq),
    )
